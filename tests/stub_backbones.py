"""Stand-ins for a backbone that tests of single agents share."""

from __future__ import annotations


class LexiconBackbone:
    """The local reader's R(s) and summarizer over the test lexicon; duck-types the Backbone methods the reader
    and summarizer agents call, and records how many sections each relevance call got."""

    name = "test-lexicon"

    def __init__(self, count_hits):
        self.count_hits = count_hits
        self.calls: list[int] = []

    def score_relevance(self, sections, kg_context):
        from karma_dagster.backbones.local.reader import score_sections

        self.calls.append(len(sections))
        return score_sections(sections, self.count_hits, kg_context)

    def summarize(self, section, max_sentences: int) -> str:
        from karma_dagster.backbones.local.summarizer import summarize

        return summarize(section.text, max_sentences, self.count_hits)[0]
