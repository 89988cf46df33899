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


def _partial_backbone_class():
    from karma_dagster.backbones.base import Backbone

    def unused(name: str):
        def method(self, *args, **kwargs):
            raise NotImplementedError(f"{type(self).__name__}.{name}: this test backbone does not answer it")
        method.__name__ = name
        return method

    methods = {name: unused(name) for name in sorted(Backbone.__abstractmethods__)}
    methods["prompt_id"] = lambda self, agent: f"test-{type(self).__name__}"
    return type("PartialBackbone", (Backbone,), {
        "__doc__": "A Backbone whose agents all raise NotImplementedError: a test overrides only the ones its agent "
                   "asks, so a call to any other fails loudly.",
        **methods,
    })


PartialBackbone = _partial_backbone_class()
