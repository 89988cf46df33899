"""The shared language resources every backbone, agent and metric uses: plain Python, no Dagster.

`lexicon` (typed terms from the KG, Hetionet, MeSH and the train corpora), `ner` (the dictionary NER filter,
`DictionaryNER`), `sentences` (the shared tokenizer and sentence splitter) and `cues` (relation, hedge and
negation cue words; a plain lexicon hit counter).
"""
