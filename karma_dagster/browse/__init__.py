"""The KG browser (issue 30): search, entity, edge, neighbourhood and timeline pages, served by the review app."""
