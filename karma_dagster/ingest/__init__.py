"""Reading source files (PDF, PMC JATS XML, PubTator, plain text) into `ParsedDocument`s."""
