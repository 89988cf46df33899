"""Sequence-variant identifiers: one id per variant mention, in the form BioRED's gold uses (tmVar's).

A variant is not in any dictionary: its id is computed from how it is written. BioRED normalizes a variant to
its dbSNP id when one is known (`rs6275`) and otherwise to tmVar's normalized form
`<seq>|<kind>|<ref>|<position>|<alt>` (`p|SUB|R|215|W` for R215W / p.Arg215Trp, `c|SUB|C|643|T` for 643C>T,
`c|DEL|657|5` for 657del5). The `|` is part of such an id, never a list separator (`split_identifier`).
An rs number written in the text is its own id; a protein or DNA change gets its tmVar form; anything else
(prose such as "deletion of exon 3") gets no id rather than a guessed one.
"""

from __future__ import annotations

import re

AA3 = {
    "ala": "A", "arg": "R", "asn": "N", "asp": "D", "cys": "C", "gln": "Q", "glu": "E", "gly": "G", "his": "H",
    "ile": "I", "leu": "L", "lys": "K", "met": "M", "phe": "F", "pro": "P", "ser": "S", "thr": "T", "trp": "W",
    "tyr": "Y", "val": "V", "ter": "X", "sec": "U", "stop": "X", "*": "X", "x": "X",
}
_AA = r"(?:Ala|Arg|Asn|Asp|Cys|Gln|Glu|Gly|His|Ile|Leu|Lys|Met|Phe|Pro|Ser|Thr|Trp|Tyr|Val|Ter|Sec|[ACDEFGHIKLMNPQRSTVWYX*])"
_ALT = rf"(?:{_AA}|stop|\*)"
_POS = r"(?:IVS\d+\s?)?[-+*]?\d+(?:\s?[-+]\s?\d+)?"  # 643, -141, 1239+1, 3318-34, IVS9+217
_NT = r"[ACGTU]"

_RS = re.compile(r"^rs\s?(\d+)$", re.IGNORECASE)
_DNA_SUB = re.compile(rf"^(?:([cgmnr])\.\s?)?({_POS})\s?({_NT})\s?(?:>|->|-->|/)\s?({_NT})$")
_RANGE = re.compile(r"^(\d+)-(\d+)$")  # 899-1142 in an edit: a range (HGVS writes 899_1142)
_DNA_SUB_PREFIX_REF = re.compile(rf"^([cgmnr])\.\s?({_NT})({_POS})({_NT})$")
_DNA_EDIT = re.compile(rf"^(?:([cgmnr])\.\s?)?({_POS}(?:_{_POS})?)\s?(delins|del|dup|ins)\s?([ACGTU]+|\d+)?$",
                       re.IGNORECASE)
_PROT_SUB = re.compile(rf"^(?:p\.\s?\(?)?({_AA})\s?(\d+)\s?({_ALT})\)?$")
_PROT_FS = re.compile(rf"^(?:p\.\s?)?({_AA})(\d+)({_AA})?fs(?:\*|X|Ter)?(\d+)?\S*$")
_PROT_EDIT = re.compile(rf"^(?:p\.\s?)?({_AA})(\d+)(?:_({_AA})(\d+))?(del|dup)$")
_PROT_ALLELE = re.compile(rf"^p\.\s?({_AA})(\d+)$")
# A bare `C1234T` reads as a protein change (Cys1234Thr) or a base change; with both letters bases and the
# position >= 1000, BioRED train annotates a base change (c/g: 4, p: 0; below 1000: c/g 6, p 3).
_NUCLEOTIDE_LIKE = re.compile(r"^[ACGT]\d+[ACGT]$")
NUCLEOTIDE_POSITION = 1000
_EDIT_KIND = {"del": "DEL", "dup": "DUP", "ins": "INS", "delins": "INDEL"}


def _aa(code: str) -> str:
    return AA3.get(code.lower(), code.upper()) if len(code) > 1 or code == "*" else code.upper()


def _pos(text: str) -> str:
    return re.sub(r"\s+", "", text)


def variant_id(text: str) -> str | None:
    """The BioRED/tmVar id of a variant mention (`rs6275`, `p|SUB|R|215|W`, `c|DEL|657|5`), None when its form
    is not one we can normalize."""
    if not isinstance(text, str):
        raise TypeError(f"variant_id needs the mention text as a str, got {type(text).__name__}")
    t = text.strip()
    if m := _RS.match(t):
        return f"rs{m.group(1)}"
    if m := _DNA_SUB_PREFIX_REF.match(t):
        return f"{m.group(1)}|SUB|{m.group(2)}|{_pos(m.group(3))}|{m.group(4)}"
    if m := _DNA_SUB.match(t):
        return f"{m.group(1) or 'c'}|SUB|{m.group(3)}|{_pos(m.group(2))}|{m.group(4)}"
    if m := _DNA_EDIT.match(t):
        seq, pos, kind, what = m.group(1) or "c", _pos(m.group(2)), _EDIT_KIND[m.group(3).lower()], m.group(4) or ""
        if (r := _RANGE.match(pos)) and int(r.group(2)) > int(r.group(1)):
            pos = f"{r.group(1)}_{r.group(2)}"
        return f"{seq}|{kind}|{pos}|{what.upper()}"
    if m := _PROT_FS.match(t):  # train's form: p.G204VfsX28 -> p|FS|G|204|V|28, p.A27fsX132 -> p|FS|A|27||132
        return f"p|FS|{_aa(m.group(1))}|{m.group(2)}|{_aa(m.group(3)) if m.group(3) else ''}|{m.group(4) or ''}"
    if m := _PROT_EDIT.match(t):
        pos = m.group(2) if not m.group(4) else f"{m.group(2)}_{m.group(4)}"
        return f"p|{_EDIT_KIND[m.group(5)]}|{pos}|"
    if m := _PROT_SUB.match(t):
        ref, pos, alt = m.group(1), m.group(2), m.group(3)
        if _NUCLEOTIDE_LIKE.match(t) and int(pos) >= NUCLEOTIDE_POSITION:
            return f"c|SUB|{ref}|{pos}|{alt}"  # C35322T: a base at a position no protein reaches
        return f"p|SUB|{_aa(ref)}|{pos}|{_aa(alt)}"
    if m := _PROT_ALLELE.match(t):
        return f"p|Allele|{_aa(m.group(1))}|{m.group(2)}"
    return None


def split_identifier(ner_type: str | None, identifier: str) -> list[str]:
    """A gold identifier field as its ids: `D002971,D002972` and BC5CDR's `D020225|D020227` are two ids each,
    while a variant's `p|SUB|V|1764|M` is one (its `|` is part of the id; `;` and `,` still separate)."""
    if not isinstance(identifier, str):
        raise TypeError(f"split_identifier needs the identifier field as a str, got {type(identifier).__name__}")
    seps = ";," if ner_type == "Variant" else ";,|"
    parts = re.split(f"[{re.escape(seps)}]", identifier)
    return [p.strip() for p in parts if p.strip() and p.strip() not in {"-", "-1"}]


# Variants written in words ("arginine to tryptophan at codon 198", "C to T at 33468"): the NER proposes these
# spans too, so the amino acids inside them are part of the variant, not chemicals of their own.
AA_NAMES = {
    "alanine": "A", "arginine": "R", "asparagine": "N", "aspartic acid": "D", "aspartate": "D", "cysteine": "C",
    "glutamine": "Q", "glutamic acid": "E", "glutamate": "E", "glycine": "G", "histidine": "H", "isoleucine": "I",
    "leucine": "L", "lysine": "K", "methionine": "M", "phenylalanine": "F", "proline": "P", "serine": "S",
    "threonine": "T", "tryptophan": "W", "tyrosine": "Y", "valine": "V",
}
NT_NAMES = {"adenine": "A", "cytosine": "C", "guanine": "G", "thymine": "T", "thymidine": "T", "uracil": "U"}
_AA_WORD = "|".join(sorted(AA_NAMES, key=len, reverse=True)) + "|" + _AA.strip("(?:)").split("|[")[0]
_AA_ANY = rf"(?:{_AA_WORD})"
_STOP = r"(?:an?\s+)?(?:stop|termination)(?:\s+codon)?"
_TO = r"\s*(?:to|by|with|for|into|->|-->|---->|→)\s*(?:an?\s+)?"
_AT = r"\s+(?:substitution\s+|change\s+|mutation\s+|transition\s+|transversion\s+)?(?:at|in)\s+(?:the\s+)?(?:amino\s+acid\s+|nucleotide\s+)?(?:position|codon|residue|base|nucleotide)?\s*"
_NT_ANY = rf"(?:{'|'.join(NT_NAMES)}|[ACGT](?![A-Za-z]))"
PROSE_VARIANT = re.compile(
    rf"\b(?P<a1>{_AA_ANY})(?:{_AT}|\s+)(?P<p1>\d{{1,5}})(?:{_TO}|\s+)(?P<b1>{_AA_ANY}|{_STOP})\b"  # arginine 150 (to) proline
    rf"|\b(?P<a2>{_AA_ANY}){_TO}(?P<b2>{_AA_ANY}|{_STOP}){_AT}(?P<p2>\d{{1,5}})\b"  # arginine to tryptophan at codon 198
    rf"|\b(?P<a3>{_NT_ANY}){_TO}(?P<b3>{_NT_ANY}){_AT}(?P<p3>[-+]?\d{{1,6}})\b",  # C to T at 33468
    re.IGNORECASE,
)


def _residue(word: str) -> str:
    w = word.lower()
    if w in AA_NAMES:
        return AA_NAMES[w]
    if w in NT_NAMES:
        return NT_NAMES[w]
    if re.match(r"(?:an?\s+)?(?:stop|termination)", w):
        return "X"
    return _aa(word) if len(word) == 3 else word.upper()


def prose_variant_id(match: re.Match[str]) -> str:
    """The tmVar id of a PROSE_VARIANT match: p|SUB|R|198|W, or c|SUB|C|33468|T for nucleotides."""
    for k, seq in (("1", "p"), ("2", "p"), ("3", "c")):
        if match.group(f"a{k}"):
            return f"{seq}|SUB|{_residue(match.group(f'a{k}'))}|{match.group(f'p{k}')}|{_residue(match.group(f'b{k}'))}"
    raise ValueError(f"not a PROSE_VARIANT match: {match.group()!r}")


# An amino acid named in its sentence beside a change ("substitution of arginine for proline", "Tyrosine (Tyr) instead of a Term")
# describes a variant, not a chemical: of the amino acid names with another one within 40 characters and a change
# word there or a position right after ("arginine 150"), 88 lie inside a gold Variant on BioRED train and none is a
# ChemicalEntity (elsewhere: 35 inside a Variant, 42 chemicals, 151 neither); on BC5CDR train none of its 54
# amino acid Chemicals (lists of neurotransmitters, "alanine aminotransferase") is such a name.
_AA_CODES = sorted({*AA_NAMES, *(k for k in AA3 if len(k) == 3 and k.isalpha())}, key=len, reverse=True)
_AA_NAME_RE = re.compile(r"\b(?:" + "|".join(_AA_CODES) + r")\b", re.IGNORECASE)
_CHANGE_CONTEXT = re.compile(
    r"\b(?:substitut\w*|replac\w*|codons?|residues?|position|mutat\w*|instead|stop|exchange\w*|transition)\b",
    re.IGNORECASE)
_POSITION_AFTER = re.compile(r"^[\s-]?\(?\d")  # arginine 150, Arg-215
AMINO_ACID_WINDOW = 40
_SENTENCE_END = re.compile(r"[.;]\s+(?=[A-Z])")


def is_amino_acid_in_change(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is an amino acid name written as part of a sequence change (see above)."""
    name = text[start:end]
    if not _AA_NAME_RE.fullmatch(name) or (len(name) == 3 and not name.istitle()):  # Arg, not VAL (valsartan)
        return False
    left, right = text[max(0, start - AMINO_ACID_WINDOW):start], text[end:end + AMINO_ACID_WINDOW]
    left, right = _SENTENCE_END.split(left)[-1], _SENTENCE_END.split(right)[0]  # within its sentence
    window = f"{left} {right}"
    return bool(_AA_NAME_RE.search(window)) and bool(_CHANGE_CONTEXT.search(window) or _POSITION_AFTER.match(right))


# "Arg399Gln (rs25487)", "-930A>G CYBA polymorphism (rs9932581)", "rs4539 (A2718G)": a change written beside the
# dbSNP id it is. BioRED gives such a change the rs id at every occurrence in the abstract (train: of the 30
# changes in abstracts that write an rs number, 26 carry one of them; each one written beside its rs number does).
_BESIDE = re.compile(r"^[ \w-]{0,30}?[(\[]\s*$")  # form ... ( rs   /   rs (  form


def rs_links(text: str, variants: list[tuple[int, int, str]]) -> dict[str, str]:
    """tmVar form -> the rs id it is written beside in `text`, from the variant mentions (start, end, id) in
    text order; a form beside two different rs ids is left alone."""
    links: dict[str, set[str]] = {}
    ordered = sorted(variants)
    for (s1, e1, a), (s2, _e2, b) in zip(ordered, ordered[1:]):
        a_rs, b_rs = a.startswith("rs"), b.startswith("rs")
        if a_rs == b_rs or not _BESIDE.match(text[e1:s2]):
            continue
        form, rs = (b, a) if a_rs else (a, b)
        links.setdefault(form, set()).add(rs)
    return {form: next(iter(ids)) for form, ids in links.items() if len(ids) == 1}
