"""A generated world of fictional people, cities and organisations, written up as wiki passages.

Holds :func:`generate_world` (a seeded :class:`World`: entities, passages,
and multi-hop :class:`Question` objects with their answers and the passages
that hold the evidence). Names are built from random syllables, so no answer
can be known from pre-training; the same seed gives the same world.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Passage", "Question", "World", "generate_world", "QUESTION_KINDS"]

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "th", "dr", "kr", "st")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "io", "ou")
_CODAS = ("", "", "n", "r", "l", "s", "th", "m")
OCCUPATIONS = (
    "astronomer",
    "cartographer",
    "glassblower",
    "botanist",
    "shipwright",
    "archivist",
    "composer",
    "clockmaker",
    "surveyor",
    "physician",
    "engraver",
    "linguist",
)
ORG_KINDS = ("Guild", "Society", "Company", "Institute", "Foundry", "Academy")


@dataclass(frozen=True)
class Passage:
    """One retrievable passage: ``doc_id`` is ``"<article title>#<n>"``."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    """A multi-hop question with its answer and the passages that hold the needed evidence."""

    text: str
    answer: str
    evidence: tuple[str, ...]
    kind: str


@dataclass
class World:
    """The generated corpus and the facts behind it."""

    passages: list[Passage] = field(default_factory=list)
    people: dict[str, dict] = field(default_factory=dict)
    cities: dict[str, dict] = field(default_factory=dict)
    orgs: dict[str, dict] = field(default_factory=dict)


def _name(rng: np.random.Generator, syllables: int) -> str:
    parts = [
        _ONSETS[int(rng.integers(len(_ONSETS)))]
        + _VOWELS[int(rng.integers(len(_VOWELS)))]
        + _CODAS[int(rng.integers(len(_CODAS)))]
        for _ in range(syllables)
    ]
    return "".join(parts).capitalize()


def _unique(rng: np.random.Generator, taken: set[str], make) -> str:
    while True:
        name = make(rng)
        if name not in taken and len(name) > 3:
            taken.add(name)
            return name


def generate_world(rng: np.random.Generator, n_people: int = 14, n_cities: int = 8, n_orgs: int = 6) -> World:
    """A seeded world of ``n_people`` people, ``n_cities`` cities and ``n_orgs`` organisations.

    Example:
        >>> world = generate_world(np.random.default_rng(0))
        >>> len(world.people), len(world.passages) > 40
        (14, True)
    """
    taken: set[str] = set()
    world = World()
    countries = [_unique(rng, taken, lambda r: _name(r, 2) + "ia") for _ in range(3)]
    for _ in range(n_cities):
        name = _unique(rng, taken, lambda r: _name(r, 2))
        world.cities[name] = {
            "country": countries[int(rng.integers(len(countries)))],
            "founded": int(rng.integers(800, 1700)),
            "river": _unique(rng, taken, lambda r: _name(r, 2)),
            "population": int(rng.integers(20, 900)) * 1000,
        }
    city_names = sorted(world.cities)
    for _ in range(n_people):
        name = _unique(rng, taken, lambda r: _name(r, 2) + " " + _name(r, 2))
        world.people[name] = {
            "born": int(rng.integers(1750, 1950)),
            "birthplace": city_names[int(rng.integers(len(city_names)))],
            "occupation": OCCUPATIONS[int(rng.integers(len(OCCUPATIONS)))],
        }
    people = sorted(world.people)
    founders = [people[int(i)] for i in rng.permutation(len(people))[:n_orgs]]
    for founder in founders:
        kind = ORG_KINDS[int(rng.integers(len(ORG_KINDS)))]
        name = _unique(rng, taken, lambda r, kind=kind: f"{_name(r, 2)} {kind}")
        world.orgs[name] = {
            "founder": founder,
            "founded": world.people[founder]["born"] + int(rng.integers(20, 50)),
            "hq": city_names[int(rng.integers(len(city_names)))],
        }
    org_names = sorted(world.orgs)
    for person in people:
        facts = world.people[person]
        facts["employer"] = org_names[int(rng.integers(len(org_names)))]
        others = [p for p in people if p != person]
        facts["mentor"] = others[int(rng.integers(len(others)))]
    world.passages = _write_passages(world, rng)
    return world


def _write_passages(world: World, rng: np.random.Generator) -> list[Passage]:
    passages = []
    for name, c in sorted(world.cities.items()):
        passages.append(
            Passage(
                f"{name}#0",
                name,
                f"{name} is a city in {c['country']}. {name} was founded in "
                f"{c['founded']}. It has about {c['population']:,} inhabitants.",
            )
        )
        passages.append(
            Passage(
                f"{name}#1",
                name,
                f"The {c['river']} River flows through {name}. Markets along "
                f"the {c['river']} River made {name} known across {c['country']}.",
            )
        )
    for name, p in sorted(world.people.items()):
        passages.append(
            Passage(
                f"{name}#0",
                name,
                f"{name} (born {p['born']}) is a {p['occupation']}. {name} was born in {p['birthplace']}.",
            )
        )
        passages.append(
            Passage(
                f"{name}#1",
                name,
                f"{name} works for the {p['employer']}. {name} was trained by "
                f"the mentor {p['mentor']}, whose methods {name} still uses.",
            )
        )
    for name, o in sorted(world.orgs.items()):
        passages.append(Passage(f"{name}#0", name, f"The {name} was founded by {o['founder']} in {o['founded']}."))
        passages.append(
            Passage(
                f"{name}#1",
                name,
                f"The headquarters of the {name} are in {o['hq']}. Members of the {name} meet there every spring.",
            )
        )
    order = rng.permutation(len(passages))
    return [passages[int(i)] for i in order]


QUESTION_KINDS = (
    "birthplace_founded",
    "employer_founder",
    "mentor_occupation",
    "founder_birthplace_river",
    "employer_hq_country",
)


def make_question(world: World, rng: np.random.Generator, kind: str | None = None) -> Question:
    """A multi-hop question about ``world`` (a random kind unless ``kind`` is given)."""
    kind = kind or QUESTION_KINDS[int(rng.integers(len(QUESTION_KINDS)))]
    if kind not in QUESTION_KINDS:
        raise ValueError(f"kind must be one of {QUESTION_KINDS}, got {kind!r}")
    people = sorted(world.people)
    person = people[int(rng.integers(len(people)))]
    facts = world.people[person]
    if kind == "birthplace_founded":
        city = facts["birthplace"]
        return Question(
            f"In what year was the city where {person} was born founded?",
            str(world.cities[city]["founded"]),
            (f"{person}#0", f"{city}#0"),
            kind,
        )
    if kind == "employer_founder":
        org = facts["employer"]
        return Question(
            f"Who founded the organisation that {person} works for?",
            world.orgs[org]["founder"],
            (f"{person}#1", f"{org}#0"),
            kind,
        )
    if kind == "mentor_occupation":
        mentor = facts["mentor"]
        return Question(
            f"What is the occupation of the mentor of {person}?",
            world.people[mentor]["occupation"],
            (f"{person}#1", f"{mentor}#0"),
            kind,
        )
    if kind == "founder_birthplace_river":
        orgs = sorted(world.orgs)
        org = orgs[int(rng.integers(len(orgs)))]
        founder = world.orgs[org]["founder"]
        city = world.people[founder]["birthplace"]
        return Question(
            f"Which river flows through the birthplace of the founder of the {org}?",
            f"{world.cities[city]['river']} River",
            (f"{org}#0", f"{founder}#0", f"{city}#1"),
            kind,
        )
    org = facts["employer"]
    city = world.orgs[org]["hq"]
    return Question(
        f"In which country are the headquarters of the organisation {person} works for?",
        world.cities[city]["country"],
        (f"{person}#1", f"{org}#1", f"{city}#0"),
        kind,
    )
