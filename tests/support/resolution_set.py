"""A labelled entity-resolution set, generated (seeded) as an extraction stage would emit it.

Entities are companies, people, places and products with real-looking names. Each entity is
mentioned in several text units under realistic variants of its name:

  companies  legal suffixes (Inc., Ltd, GmbH, LLC, Corporation), case, typos, abbreviations
             (International -> Intl, Technologies -> Tech, and -> &), acronyms of long names
  people     initials ("J. Smith"), "Smith, John" word order, middle initials, case, typos,
             transliterations (Mikhail/Michail, Yuri/Iouri, -ov/-off, Tchaikovsky/Chaikovsky)
  places     Saint/St., accents (München/Munchen), case, typos
  products   brand prefix dropped or kept, number attached ("Vision12"), case

and hard negatives that must stay apart: a company and its regional arm ("Contoso" and
"Contoso EMEA"), two people sharing a surname (often related to each other), a city and a
person named like it ("Paris" and "Paris Hilton"), two models of one product line ("Vision 11",
"Vision 12", "Vision 12 Pro"), two places sharing a name in different regions.

Every mention carries a type, a short description drawn from its entity's facts (so two
mentions of one entity share some words and not others) and the names it co-occurs with in
its unit, as relationships. Two entities never share a normalised name (the generator drops a
variant that would collide), so every error is the resolver's, not the labels'.

`generate(n_entities, seed)` -> (extraction rows as dicts, gold: {(unit_id, mention name):
entity label}). `pairwise(pred, gold)` -> (precision, recall) over mention pairs.
`generate_mentions(n, seed)` -> exactly n mentions for the blocking-at-scale figures, from
scale_vocab(): the fixed lists above extended with made-up, pronounceable names (the fixed lists
alone cannot give the ~125k entities of a million mentions distinct names), drawn with a heavy
head as real name frequencies are.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field

FIRST = ["John", "Mary", "James", "Patricia", "Robert", "Jennifer", "Michael", "Linda", "David", "Elizabeth",
         "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Charles", "Karen",
         "Daniel", "Nancy", "Matthew", "Lisa", "Anthony", "Margaret", "Mark", "Sandra", "Steven", "Ashley",
         "Andrew", "Emily", "Kenneth", "Donna", "Paul", "Michelle", "Joshua", "Carol", "Kevin", "Amanda",
         "Brian", "Melissa", "George", "Deborah", "Timothy", "Stephanie", "Ronald", "Rebecca", "Jason", "Laura",
         "Mikhail", "Yuri", "Sergei", "Dmitri", "Olga", "Natalia", "Alexei", "Pyotr", "Fyodor", "Tatiana",
         "Hiroshi", "Yuki", "Kenji", "Aiko", "Wei", "Li", "Mohammed", "Fatima", "Ahmed", "Aisha", "Omar",
         "Chloe", "Lucas", "Hugo", "Ines", "Mateo", "Sofia", "Lars", "Ingrid", "Piotr", "Agnieszka", "Raj",
         "Priya", "Arjun", "Ananya", "Kwame", "Amara", "Diego", "Valentina", "Tomasz", "Eszter", "Bjorn"]
LAST = ["Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
        "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Martin",
        "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson",
        "Walker", "Young", "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill", "Flores", "Green",
        "Adams", "Nelson", "Baker", "Hall", "Rivera", "Campbell", "Mitchell", "Carter", "Roberts", "Ivanov",
        "Petrov", "Smirnov", "Kuznetsov", "Popov", "Sokolov", "Lebedev", "Kozlov", "Novikov", "Morozov",
        "Tchaikovsky", "Gorbachev", "Khrushchev", "Tanaka", "Suzuki", "Takahashi", "Watanabe", "Yamamoto",
        "Wang", "Zhang", "Chen", "Liu", "Yang", "Haddad", "Khalil", "Rahman", "Hussein", "Dubois", "Lefebvre",
        "Moreau", "Fournier", "Schneider", "Fischer", "Weber", "Becker", "Kowalski", "Nowak", "Wisniewski",
        "Patel", "Sharma", "Gupta", "Mensah", "Okafor", "Fernandez", "Silva", "Santos", "Horvath", "Lindqvist"]
CO_HEAD = ["Contoso", "Northwind", "Fabrikam", "Adventure", "Blue Harbor", "Tailspin", "Wingtip", "Litware",
           "Proseware", "Lucerne", "Margie", "Trey", "Woodgrove", "Alpine", "Coho", "Humongous", "Wide World",
           "Graphic", "Fourth Coffee", "Southridge", "Datum", "Consolidated", "Relecloud", "Bellows", "Lamna",
           "Cascade", "Redwood", "Silverline", "Ironbridge", "Oakmont", "Brightwater", "Castor", "Meridian",
           "Summit", "Keystone", "Evergreen", "Granite", "Horizon", "Pinnacle", "Sterling", "Vantage", "Zenith",
           "Aurora", "Beacon", "Crescent", "Falcon", "Harbor", "Juniper", "Kestrel", "Lighthouse", "Maple",
           "Nimbus", "Orion", "Polaris", "Quarry", "Riverstone", "Sapphire", "Trident", "Vertex", "Willow"]
CO_TAIL = ["Traders", "Pharmaceuticals", "Logistics", "Technologies", "Systems", "Airlines", "Insurance",
           "Manufacturing", "Energy", "Foods", "Bank", "Software", "Shipping", "Textiles", "Motors",
           "Consulting", "Media", "Health", "Robotics", "Chemicals", "Mining", "Capital", "Telecom", "Hotels",
           "International Holdings", "Industrial Solutions", "Freight Services", "Power and Light"]
ABBREV = {"International": "Intl", "Technologies": "Tech", "Manufacturing": "Mfg", "Pharmaceuticals": "Pharma",
          "Systems": "Sys", "Services": "Svcs", "Industrial": "Ind", "Holdings": "Hldgs", "and": "&",
          "Saint": "St.", "Mount": "Mt.", "Fort": "Ft."}
LEGAL = ["Inc.", "Ltd", "Ltd.", "GmbH", ", LLC", "Corporation", "Corp.", "PLC", "S.A.", "Co.", "Limited", "AG"]
REGION = ["EMEA", "Asia Pacific", "North America", "Foundation", "Ventures", "Labs", "Europe", "Japan"]
CITY = ["Paris", "London", "Berlin", "Madrid", "Lisbon", "Rotterdam", "Antwerp", "Dublin", "Vienna", "Prague",
        "Warsaw", "Helsinki", "Oslo", "Copenhagen", "Stockholm", "Zurich", "Geneva", "Milan", "Naples", "Athens",
        "Istanbul", "Cairo", "Lagos", "Nairobi", "Mumbai", "Delhi", "Shanghai", "Beijing", "Osaka", "Kyoto",
        "Seoul", "Manila", "Jakarta", "Sydney", "Auckland", "Toronto", "Montreal", "Chicago", "Houston",
        "Denver", "Phoenix", "Seattle", "Boston", "Atlanta", "Lima", "Bogota", "Santiago", "Quito",
        "São Paulo", "München", "Köln", "Zürich", "Málaga", "Córdoba", "Kraków", "Gdańsk", "Brno", "Łódź",
        "Saint Petersburg", "Saint Louis", "Mount Vernon", "Fort Worth", "New York City", "Los Angeles",
        "Springfield", "Richmond", "Portland", "Columbia", "Georgetown", "Salem"]
REGIONS_OF = ["Illinois", "Massachusetts", "Oregon", "Maine", "Virginia", "Ohio", "Texas", "Guyana", "Penang"]
PRODUCT_LINE = ["Vision", "Pulse", "Aero", "Nova", "Quantum", "Stride", "Echo", "Flex", "Orbit", "Titan", "Halo",
                "Spark", "Vector", "Pixel", "Atlas", "Fusion", "Glide", "Prism", "Surge", "Zen"]
EDITION = ["Pro", "Max", "Mini", "Lite", "Plus", "Ultra"]
TRANSLIT = [("Mikhail", "Michail"), ("Yuri", "Iouri"), ("Sergei", "Sergey"), ("Dmitri", "Dmitry"),
            ("Alexei", "Aleksei"), ("Pyotr", "Piotr"), ("Fyodor", "Feodor"), ("Tatiana", "Tatyana"),
            ("Natalia", "Natalya"), ("Mohammed", "Muhammad"), ("Ahmed", "Ahmad"), ("Tchaikovsky", "Chaikovsky"),
            ("Gorbachev", "Gorbachov"), ("Khrushchev", "Khrushchov"), ("Ivanov", "Ivanoff"), ("Petrov", "Petroff"),
            ("Smirnov", "Smirnoff"), ("Popov", "Popoff"), ("Aisha", "Aysha"), ("Hussein", "Husayn"),
            ("Wei", "Wey"), ("Haddad", "Hadad")]
ROLE = ["engineer", "executive", "journalist", "researcher", "lawyer", "physician", "architect", "economist",
        "diplomat", "novelist", "composer", "athlete", "investor", "professor", "curator", "pilot"]
THING = ["supply chain", "port operations", "clinical trials", "cloud software", "freight forwarding",
         "solar panels", "retail banking", "consumer electronics", "container shipping", "generic drugs",
         "industrial robots", "satellite broadband", "organic foods", "luxury hotels", "steel products"]
LEGAL_WORDS = {"inc", "ltd", "llc", "gmbh", "plc", "corp", "co", "sa", "bv", "ag", "nv", "llp", "pty", "srl", "spa",
               "oy", "ab", "kg", "limited", "incorporated", "corporation", "company"}


def normalised(name: str) -> str:
    """The Python twin of resolve.normalised with the default config (for collision checks)."""
    s = "".join(c for c in unicodedata.normalize("NFD", name.strip().lower()) if not unicodedata.combining(c))
    s = s.replace("ł", "l").replace("ø", "o")
    toks = re.sub(r"[^\w]+|_", " ", s).split()
    while len(toks) > 1 and toks[-1] in LEGAL_WORDS:
        toks.pop()
    return " ".join(toks)


@dataclass
class Entity:
    label: str
    name: str
    type: str
    facts: list[str]
    variants: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Vocab:
    """The name lists entities are drawn from. The fixed lists above name at most a few
    thousand distinct entities: enough for the labelled set, far too few for a million mentions
    (the generator refuses a name whose normalised form is taken). scale_vocab() extends them
    with made-up but pronounceable given names, surnames, company words, towns and product
    lines; pick() then draws with a heavy head (the real names come first in each list), as
    name frequencies in text are skewed: a few first names and surnames are very common, most
    are rare, so first-token and last-token blocks have realistic, uneven sizes."""

    first: tuple[str, ...]
    last: tuple[str, ...]
    co_head: tuple[str, ...]
    co_tail: tuple[str, ...]
    city: tuple[str, ...]
    regions_of: tuple[str, ...]
    product_line: tuple[str, ...]
    skew: float = 2.0  # index = len * u**skew: P(index < k) = (k / len) ** (1 / skew); "John" ~4% of people

    def pick(self, rng: random.Random, lst):
        return lst[int(len(lst) * rng.random() ** self.skew)]


DEFAULT_VOCAB = Vocab(tuple(FIRST), tuple(LAST), tuple(CO_HEAD), tuple(CO_TAIL), tuple(CITY), tuple(REGIONS_OF),
                      tuple(PRODUCT_LINE))

_ONSET = ["b", "br", "c", "ch", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "kr", "l", "m", "n", "p", "pr", "r",
          "s", "sh", "st", "t", "tr", "v", "w", "z", "", ""]
_VOWEL = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ea", "ou", "y"]
_CODA = ["", "", "", "n", "r", "l", "s", "t", "m", "nd", "rt", "ck", "ld", "rn"]
_SURNAME_END = ["son", "sen", "ez", "es", "ov", "ova", "ski", "sky", "ic", "ovic", "enko", "ian", "yan", "berg",
                "stein", "mann", "ley", "ton", "field", "wood", "ford", "er", "ell", "ini", "elli", "ato", "ida",
                "oglu", "ishi", "moto", "wala", "ard", "ier", "ek", "as", "is", "ous", "ing", "ham", "well"]
_GIVEN_END = ["a", "o", "an", "el", "en", "ia", "ina", "us", "ius", "ik", "ko", "ra", "is", "on", "ette", "ie"]
_CO_END = ["tek", "ex", "ia", "on", "ix", "ara", "ora", "io", "ium", "ant", "ent", "ica", "ova", "elle", "ar", "is"]
_TOWN_END = ["ford", "ton", "ville", "burg", "port", "field", "haven", "mouth", "bridge", "stadt", "dorf", "grad",
             "polis", "abad", "pur", "wick", "minster", "by", "thorpe", "dale", "holm", "vik", "ow", "ice"]


def _syllables(rng: random.Random, k: int) -> str:
    return "".join(rng.choice(_ONSET) + rng.choice(_VOWEL) + rng.choice(_CODA) for _ in range(k))


def _made_up(rng: random.Random, count: int, make, taken: set[str]) -> list[str]:
    """count distinct made-up words from make(rng), none of them in taken (compared lower-case)."""
    out: list[str] = []
    seen = {t.lower() for t in taken}
    tries = 0
    while len(out) < count and tries < count * 50:
        tries += 1
        w = make(rng)
        if 4 <= len(w) <= 14 and w.lower() not in seen and w.isalpha():
            seen.add(w.lower())
            out.append(w[0].upper() + w[1:])
    return out


def scale_vocab(seed: int = 0, given: int = 600, surnames: int = 40000, companies: int = 12000,
                towns: int = 10000, lines: int = 2500) -> Vocab:
    """The fixed lists first, then made-up names, for generated sets of up to millions of mentions."""
    rng = random.Random(f"vocab{seed}")
    return Vocab(
        first=tuple(FIRST + _made_up(rng, given - len(FIRST), lambda r: _syllables(r, r.choice([1, 2])) + r.choice(_GIVEN_END), set(FIRST))),
        last=tuple(LAST + _made_up(rng, surnames - len(LAST), lambda r: _syllables(r, r.choice([1, 1, 2])) + r.choice(_SURNAME_END), set(LAST))),
        co_head=tuple(CO_HEAD + _made_up(rng, companies - len(CO_HEAD), lambda r: _syllables(r, r.choice([1, 2])) + r.choice(_CO_END), set(CO_HEAD))),
        co_tail=tuple(CO_TAIL),
        city=tuple(CITY + _made_up(rng, towns - len(CITY), lambda r: _syllables(r, r.choice([1, 2])) + r.choice(_TOWN_END), set(CITY))),
        regions_of=tuple(REGIONS_OF),
        product_line=tuple(PRODUCT_LINE + _made_up(rng, lines - len(PRODUCT_LINE), lambda r: _syllables(r, 2), set(PRODUCT_LINE))),
    )


def _typo(rng: random.Random, name: str) -> str:
    words = name.split()
    idx = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
    if not idx:
        return name
    i = rng.choice(idx)
    w = words[i]
    j = rng.randrange(1, len(w) - 2)
    op = rng.randrange(3)
    if op == 0:
        w = w[:j] + w[j + 1] + w[j] + w[j + 2:]  # swapped letters
    elif op == 1:
        w = w[:j] + w[j + 1:]  # dropped letter
    else:
        w = w[:j] + w[j] + w[j:]  # doubled letter
    words[i] = w
    return " ".join(words)


def _case(rng: random.Random, name: str) -> str:
    return rng.choice([name.upper(), name.lower()])


def _abbrev(name: str) -> str:
    return " ".join(ABBREV.get(w, w) for w in name.split())


def _translit(name: str) -> str:
    for a, b in TRANSLIT:
        name = re.sub(rf"\b{a}\b", b, name)
    return name


def _company_variants(rng, name):
    v = [name + " " + rng.choice(LEGAL).lstrip(", "), name + ", " + rng.choice(LEGAL).lstrip(", "),
         _case(rng, name), _typo(rng, name), _abbrev(name)]
    words = name.split()
    if len(words) >= 3:
        v.append("".join(w[0] for w in words if w not in ("and", "of")).upper())
    return v


def _person_variants(rng, first, last, middle):
    full = f"{first} {last}"
    return [f"{first[0]}. {last}", f"{last}, {first}", f"{first} {middle}. {last}", _case(rng, full),
            _typo(rng, full), _translit(full), f"{first[0]}. {_translit(last)}", f"{_translit(first)} {last}"]


def _place_variants(rng, name):
    folded = "".join(c for c in unicodedata.normalize("NFD", name) if not unicodedata.combining(c))
    return [_abbrev(name), folded, _case(rng, name), _typo(rng, name), name.replace(" ", "-")]


def _product_variants(rng, brand, line, number, edition):
    base = f"{line} {number}" + (f" {edition}" if edition else "")
    return [f"{brand} {base}", f"{line}{number}" + (f" {edition}" if edition else ""), _case(rng, base),
            _typo(rng, f"{brand} {base}")]


def _entities(n: int, rng: random.Random, vocab: "Vocab | None" = None) -> list[Entity]:
    """About n entities, hard-negative families included, with unique normalised names.

    vocab None: the fixed name lists above, drawn uniformly (the labelled quality set).
    A Vocab: its (much longer) lists, drawn with its skewed pick (the scale sets)."""
    V = vocab or DEFAULT_VOCAB
    pick = (lambda lst: vocab.pick(rng, lst)) if vocab else rng.choice
    out: list[Entity] = []
    owner: dict[str, str] = {}

    def add(label, name, etype, facts, variants):
        key = normalised(name)
        if key in owner:
            return None
        owner[key] = label
        e = Entity(label, name, etype, facts)
        for v in variants:
            k = normalised(v)
            if k and owner.setdefault(k, label) == label and v not in e.variants and v != name:
                e.variants.append(v)
        out.append(e)
        return e

    i = 0
    while len(out) < n:
        i += 1
        kind = rng.random()
        city, thing = pick(V.city), rng.choice(THING)
        if kind < 0.3:  # a company, sometimes with a regional arm that must stay apart
            name = f"{pick(V.co_head)} {pick(V.co_tail)}" if rng.random() < 0.8 else pick(V.co_head)
            year = rng.randrange(1890, 2020)
            parent = add(f"org{i}", name, "ORGANIZATION",
                         [f"company in {thing}", f"headquartered in {city}", f"founded in {year}",
                          f"listed on the {rng.choice(['NYSE', 'LSE', 'Nasdaq', 'DAX'])} exchange",
                          f"supplier of {thing} to {pick(V.city)} customers"],
                         _company_variants(rng, name))
            if parent and rng.random() < 0.4:
                region = rng.choice(REGION)
                arm = add(f"org{i}r", f"{name} {region}", "ORGANIZATION",
                          [f"regional {region} arm of {name}", f"office in {pick(V.city)}",
                           f"set up in {rng.randrange(1990, 2024)}", f"sells {thing} locally"],
                          [f"{name} {region} " + rng.choice(LEGAL), _case(rng, f"{name} {region}")])
                if arm:
                    arm.related.append(parent.label)
                    parent.related.append(arm.label)
        elif kind < 0.6:  # a person, sometimes with a relative sharing the surname
            first, last = pick(V.first), pick(V.last)
            middle = rng.choice("ABCDEFGHJKLMNPRST")
            role = rng.choice(ROLE)
            p = add(f"per{i}", f"{first} {last}", "PERSON",
                    [f"{role} born in {city}", f"works on {thing}", f"{role} based in {pick(V.city)}",
                     f"studied in {pick(V.city)} in {rng.randrange(1960, 2015)}"],
                    _person_variants(rng, first, last, middle))
            if p and rng.random() < 0.4:
                other = pick([f for f in V.first if f[0] != first[0]])
                q = add(f"per{i}s", f"{other} {last}", "PERSON",
                        [f"{rng.choice(ROLE)} born in {pick(V.city)}", f"sibling of {first} {last}",
                         f"lives in {pick(V.city)}"],
                        [_case(rng, f"{other} {last}"), f"{last}, {other}"])
                if q:
                    q.related.append(p.label)
                    p.related.append(q.label)
        elif kind < 0.8:  # a place; sometimes a namesake person or a same-name place elsewhere
            name = city if rng.random() < 0.6 else f"{city}, {pick(V.regions_of)}"
            place = add(f"loc{i}", name, "LOCATION",
                        [f"city with a port handling {thing}", f"population of {rng.randrange(1, 90)}00,000",
                         f"capital of its region", f"city on the {rng.choice(['river', 'coast', 'lake'])}"],
                        _place_variants(rng, name))
            if place and rng.random() < 0.3:
                namesake = f"{city.split()[0]} {pick(V.last)}"
                add(f"loc{i}p", namesake, "PERSON",
                    [f"{rng.choice(ROLE)} and media personality", f"known for {thing} campaigns"],
                    [_case(rng, namesake)])
        else:  # a product line with several models that must stay apart
            brand, line = pick(V.co_head), pick(V.product_line)
            number = rng.randrange(2, 20)
            for k, (num, ed) in enumerate([(number, None), (number + 1, None), (number, rng.choice(EDITION))]):
                if k and rng.random() < 0.5:
                    continue
                base = f"{line} {num}" + (f" {ed}" if ed else "")
                add(f"prd{i}_{k}", base, "PRODUCT",
                    [f"{brand} device released in {2000 + num + (k == 1)}",
                     f"{'premium ' if ed else ''}model with {rng.choice(['OLED', 'LCD', 'e-ink'])} screen",
                     f"sold by {brand}"],
                    _product_variants(rng, brand, line, num, ed))
    by_label = {e.label: e for e in out}
    for e in out:  # co-occurring partners, as extraction would find them
        for other in rng.sample(out, k=min(3, len(out))):
            if other.label != e.label and other.label not in e.related:
                e.related.append(other.label)
                other.related.append(e.label)
        e.related = [r for r in e.related if r in by_label]
    return out


def generate(n_entities: int, seed: int = 1, mentions_per_entity: tuple[int, int] = (2, 6),
             vocab: Vocab | None = None, max_mentions: int | None = None):
    """(extraction rows, gold): each row is one text unit about one entity under one variant,
    with one or two related entities and the relationships between them. max_mentions: stop
    as soon as the set holds that many mentions (gold entries), so a size is exact."""
    rng = random.Random(seed)
    ents = _entities(n_entities, rng, vocab)
    by_label = {e.label: e for e in ents}
    rows, gold = [], {}

    def mention(e: Entity, main: bool):
        name = e.name if (not e.variants or rng.random() < (0.3 if main else 0.6)) else rng.choice(e.variants)
        desc = "; ".join(rng.sample(e.facts, k=min(len(e.facts), rng.choice([1, 2]))))
        return name, desc

    def full() -> bool:
        return max_mentions is not None and len(gold) >= max_mentions

    u = 0
    for e in ents:
        for _ in range(rng.randint(*mentions_per_entity)):
            if full():
                break
            u += 1
            unit = f"u{seed}_{u}"
            name, desc = mention(e, True)
            listed = [(name, e.type, desc)]
            gold[(unit, name)] = e.label
            rels = []
            for lab in rng.sample(e.related, k=min(len(e.related), rng.choice([1, 2]))):
                o = by_label[lab]
                oname, odesc = mention(o, False)
                if (unit, oname) in gold or full():
                    continue
                listed.append((oname, o.type, odesc))
                gold[(unit, oname)] = o.label
                rels.append((name, oname, f"{name} and {oname} are linked", rng.randint(1, 10)))
            rows.append({"unit_id": unit, "entities": listed, "relationships": rels})
    return rows, gold


MENTIONS_PER_ENTITY = 10.0  # about what generate() yields per entity (main and co-occurring mentions)


def generate_mentions(n_mentions: int, seed: int = 7, vocab: Vocab | None = None):
    """Exactly n_mentions mentions (gold entries) from the scale vocabulary: entities are
    generated with a margin and the rows stop at n_mentions."""
    vocab = vocab or scale_vocab()
    n_entities = int(n_mentions / MENTIONS_PER_ENTITY * 1.25) + 10
    rows, gold = generate(n_entities, seed=seed, vocab=vocab, max_mentions=n_mentions)
    if len(gold) != n_mentions:
        raise RuntimeError(f"generated {len(gold)} mentions, wanted {n_mentions}: raise the entity margin")
    return rows, gold


def extraction_rows(rows: list[dict], prompt_hash: str, model: str) -> list[dict]:
    """generate()'s units as rows of the extractions table (status ok)."""
    from datetime import datetime, timezone

    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [{
        "unit_id": r["unit_id"], "prompt_hash": prompt_hash, "model": model, "status": "ok",
        "entities": [{"name": n, "type": t, "description": d} for n, t, d in r["entities"]],
        "relationships": [{"source": s, "target": t, "description": d, "strength": w}
                          for s, t, d, w in r["relationships"]],
        "claims": [], "tokens_in": 0, "tokens_out": 0, "gleanings": 0, "error": None, "raw": "{}",
        "run_id": "bench", "extracted_at": at,
    } for r in rows]


def pairwise(pred: dict, gold: dict) -> tuple[float, float]:
    """Pairwise precision and recall over mentions: pred and gold map each mention to a cluster."""
    def pairs(counter):
        return sum(c * (c - 1) // 2 for c in counter.values())

    both = Counter((pred[m], gold[m]) for m in gold)
    tp = pairs(both)
    predicted = pairs(Counter(pred[m] for m in gold))
    true = pairs(Counter(gold.values()))
    return (tp / predicted if predicted else 1.0), (tp / true if true else 1.0)


def summary(gold: dict) -> dict:
    """Counts that describe a generated set (for the results file)."""
    per = defaultdict(set)
    for (_, name), lab in gold.items():
        per[lab].add(name)
    return {"mentions": len(gold), "entities": len(per), "distinct_names": sum(len(v) for v in per.values())}
