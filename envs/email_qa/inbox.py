"""A generated email inbox in SQLite with FTS5, and questions about it (the ART-E task).

Holds :func:`generate_inbox`, which builds a seeded :class:`Inbox`: senders,
threads with replies, dates, attachment names, a few kinds of fact-bearing
email (flight bookings, invoices, meetings, deliveries, shared files) among
everyday distractors, stored in an in-memory SQLite database with an FTS5
index (a deep copy or an unpickled inbox rebuilds its own database from
the emails, so copies never share a connection); and :func:`make_question`, which asks about one fact (or about one
that is not in the inbox, where "I don't know" is the right answer).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np

__all__ = ["Email", "InboxQuestion", "Inbox", "generate_inbox", "make_question", "QUESTION_KINDS"]

FIRST = (
    "Alma",
    "Bruno",
    "Cleo",
    "Dario",
    "Elif",
    "Femi",
    "Greta",
    "Hugo",
    "Ivy",
    "Jun",
    "Kemal",
    "Lena",
    "Milo",
    "Nadia",
    "Omar",
    "Pia",
    "Quinn",
    "Rosa",
    "Sami",
    "Tova",
)
LAST = (
    "Arndt",
    "Boateng",
    "Castell",
    "Duarte",
    "Ekberg",
    "Fontaine",
    "Gallo",
    "Horvat",
    "Ibsen",
    "Jaramillo",
    "Kowal",
    "Lindqvist",
    "Moreau",
    "Nakata",
    "Oyelaran",
    "Petrov",
)
CITIES = ("Lisbon", "Oslo", "Nairobi", "Osaka", "Quito", "Tbilisi", "Hanoi", "Porto", "Dakar", "Lima", "Riga", "Perth")
COMPANIES = ("Brightwave", "Copperleaf", "Dunmore", "Everfield", "Granite Peak", "Hollow Pine", "Ironbark", "Juniper")
PROJECTS = ("Atlas", "Beacon", "Cobalt", "Delta", "Ember", "Falcon", "Harbor", "Lumen")
SHOPS = ("Parcelio", "Shopbay", "Nordcart", "Kiteway")
FILLER = (
    "Lunch on Friday?",
    "Quick question",
    "Re: notes from today",
    "Weekend plans",
    "Coffee next week",
    "Reminder: expense reports",
    "Photos from the trip",
    "Team offsite ideas",
    "Book recommendation",
)
FILLER_BODY = (
    "Are you free for lunch on Friday? The new place near the office has good reviews.",
    "Could you send me the slides when you get a chance? No rush.",
    "Thanks for the notes, they were really helpful. Let's sync later this week.",
    "We are thinking of going hiking this weekend if the weather holds. Want to join?",
    "Just a reminder that expense reports are due at the end of the month.",
    "Here are a few ideas for the offsite: a cooking class, a boat tour, or a museum visit.",
)


@dataclass(frozen=True)
class Email:
    """One message: ``id`` is what ``read_email`` takes; dates are ISO ``YYYY-MM-DD``."""

    id: int
    thread: int
    sender: str
    recipients: str
    date: str
    subject: str
    body: str
    attachments: tuple[str, ...] = ()


@dataclass(frozen=True)
class InboxQuestion:
    """A question, its gold answer (``None`` when the inbox does not hold it) and the emails that do."""

    text: str
    answer: str | None
    sources: tuple[int, ...]
    kind: str


@dataclass
class Inbox:
    """The owner's address, the emails, and the facts that questions are made from."""

    owner: str
    emails: list[Email] = field(default_factory=list)
    facts: list[tuple[str, dict]] = field(default_factory=list)  # (kind, details incl. "source" and "answer")
    db: sqlite3.Connection | None = None

    def __getstate__(self) -> dict:
        # a sqlite3 connection cannot be pickled: a copy rebuilds its own database from the emails (under 1 ms)
        state = self.__dict__.copy()
        state["db"] = self.db is not None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.db = _database(self.emails) if state["db"] else None  # a closed inbox stays closed


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _code(rng: np.random.Generator, letters: int, digits: int) -> str:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), letters)) + "".join(
        str(int(d)) for d in rng.integers(0, 10, digits)
    )


def generate_inbox(rng: np.random.Generator, n_facts: int = 8, n_filler: int = 30) -> Inbox:
    """A seeded inbox with ``n_facts`` fact-bearing emails (some with replies) and ``n_filler`` others.

    Example:
        >>> inbox = generate_inbox(np.random.default_rng(0))
        >>> len(inbox.emails) >= 38
        True
        >>> inbox.db.execute("SELECT count(*) FROM emails_fts").fetchone()[0] == len(inbox.emails)
        True
    """
    cast = _cast(rng)
    start = date(2024, 1, 1) + timedelta(days=int(rng.integers(0, 300)))
    drafts, facts = _fact_drafts(rng, cast, start, n_facts)
    drafts += _filler_drafts(rng, cast, start, n_filler)
    emails = _emails_in_date_order(rng, drafts, cast.owner, facts)
    inbox = Inbox(cast.owner, emails, facts)
    inbox.db = _database(emails)
    return inbox


@dataclass(frozen=True)
class _Cast:
    """The inbox's owner and the contacts who write to them (``address`` maps a contact's name to their email)."""

    owner_name: str
    owner: str
    contacts: tuple[str, ...]
    address: dict[str, str]


def _cast(rng: np.random.Generator) -> _Cast:
    owner_name = f"{_pick(rng, FIRST)} {_pick(rng, LAST)}"
    owner = owner_name.lower().replace(" ", ".") + "@mailbox.test"
    contacts = sorted({f"{_pick(rng, FIRST)} {_pick(rng, LAST)}" for _ in range(12)} - {owner_name})
    address = {
        name: name.lower().replace(" ", ".") + "@" + _pick(rng, ("acme.test", "post.test", "work.test"))
        for name in contacts
    }
    return _Cast(owner_name, owner, tuple(contacts), address)


_FACT_KINDS = ("flight", "invoice", "meeting", "delivery", "attachment")


def _fact_drafts(
    rng: np.random.Generator, cast: _Cast, start: date, n_facts: int
) -> tuple[list[dict], list[tuple[str, dict]]]:
    """The fact-bearing emails (each kind once, then kinds at random), half of them with a reply, and their facts."""
    drafts: list[dict] = []
    facts: list[tuple[str, dict]] = []
    for index in range(n_facts):
        kind = _FACT_KINDS[index] if index < len(_FACT_KINDS) else _pick(rng, _FACT_KINDS)
        day = start + timedelta(days=int(rng.integers(0, 120)))
        person = _pick(rng, cast.contacts)
        draft, fact = _fact_email(rng, kind, day, person, cast, facts)
        facts.append((kind, fact))
        draft["date"] = day.isoformat()
        draft["fact"] = len(facts) - 1
        drafts.append(draft)
        if rng.random() < 0.5:  # a reply in the same thread, without the fact
            drafts.append(
                {
                    "sender": cast.owner,
                    "recipients": draft["sender"],
                    "subject": "Re: " + draft["subject"],
                    "body": "Thanks, received. I will get back to you if anything changes.",
                    "date": (day + timedelta(days=1)).isoformat(),
                    "thread_of": len(drafts) - 1,
                }
            )
    return drafts, facts


def _fact_email(
    rng: np.random.Generator, kind: str, day: date, person: str, cast: _Cast, facts: list[tuple[str, dict]]
) -> tuple[dict, dict]:
    """One email of ``kind`` received on ``day`` and the fact it holds (with its ``answer``)."""
    if kind == "flight":  # one flight per city, so a question about a city has one answer
        booked = {fact["city"] for k, fact in facts if k == "flight"}
        return _flight_email(rng, day, cast.owner_name, booked)
    if kind == "invoice":
        return _invoice_email(rng, day)
    if kind == "meeting":
        return _meeting_email(rng, day, cast.address[person], cast.owner_name)
    if kind == "delivery":
        return _delivery_email(rng)
    return _attachment_email(rng, person, cast.address[person])


def _flight_email(rng: np.random.Generator, day: date, owner_name: str, booked: set[str]) -> tuple[dict, dict]:
    city = _pick(rng, tuple(c for c in CITIES if c not in booked))
    code = _code(rng, 3, 3)
    trip = day + timedelta(days=int(rng.integers(5, 40)))
    draft = {
        "sender": "bookings@skyway.test",
        "subject": f"Your flight to {city} is confirmed",
        "body": f"Dear {owner_name}, your flight to {city} on {trip.isoformat()} is booked. "
        f"Your confirmation code is {code}. Please arrive two hours before departure.",
    }
    return draft, {"city": city, "answer": code}


def _invoice_email(rng: np.random.Generator, day: date) -> tuple[dict, dict]:
    company = _pick(rng, COMPANIES)
    amount = f"${int(rng.integers(120, 9000))}.{int(rng.integers(0, 100)):02d}"
    due = day + timedelta(days=30)
    number = int(rng.integers(1000, 9999))
    draft = {
        "sender": f"billing@{company.lower().replace(' ', '')}.test",
        "subject": f"Invoice {number} from {company}",
        "body": f"Hello, please find attached invoice {number} from {company} for {amount}, due on "
        f"{due.isoformat()}. Thank you for your business.",
        "attachments": (f"invoice_{number}.pdf",),
    }
    return draft, {"company": company, "number": number, "answer": amount}


def _meeting_email(rng: np.random.Generator, day: date, sender: str, owner_name: str) -> tuple[dict, dict]:
    project = _pick(rng, PROJECTS)
    building = _pick(rng, ("Maple", "Cedar", "Birch", "Willow", "Aspen"))
    room = f"{building} {int(rng.integers(1, 6))}{int(rng.integers(0, 3))}"
    draft = {
        "sender": sender,
        "subject": f"{project} kickoff meeting",
        "body": f"Hi {owner_name.split()[0]}, the {project} kickoff is on {day.isoformat()} at "
        f"{int(rng.integers(9, 17))}:00 in room {room}. Bring your laptop.",
    }
    return draft, {"project": project, "answer": room}


def _delivery_email(rng: np.random.Generator) -> tuple[dict, dict]:
    shop = _pick(rng, SHOPS)
    tracking = _code(rng, 2, 8)
    draft = {
        "sender": f"orders@{shop.lower()}.test",
        "subject": f"Your {shop} order has shipped",
        "body": f"Good news! Your order from {shop} is on its way. Tracking number: {tracking}. "
        "Expected delivery in 3 to 5 days.",
    }
    return draft, {"shop": shop, "answer": tracking}


def _attachment_email(rng: np.random.Generator, person: str, sender: str) -> tuple[dict, dict]:
    project = _pick(rng, PROJECTS)
    topic = _pick(rng, ("budget", "roadmap", "draft", "summary"))
    filename = f"{project.lower()}_{topic}_v{int(rng.integers(2, 9))}.xlsx"
    draft = {
        "sender": sender,
        "subject": f"{project} files",
        "body": f"Hi, attached is the latest file for {project}. Let me know what you think.",
        "attachments": (filename,),
    }
    return draft, {"project": project, "person": person, "answer": filename}


def _filler_drafts(rng: np.random.Generator, cast: _Cast, start: date, n_filler: int) -> list[dict]:
    """Everyday emails from contacts that hold no fact (the distractors)."""
    drafts = []
    for _ in range(n_filler):
        person = _pick(rng, cast.contacts)
        drafts.append(
            {
                "sender": cast.address[person],
                "subject": _pick(rng, FILLER),
                "body": _pick(rng, FILLER_BODY),
                "date": (start + timedelta(days=int(rng.integers(0, 120)))).isoformat(),
            }
        )
    return drafts


def _emails_in_date_order(
    rng: np.random.Generator, drafts: list[dict], owner: str, facts: list[tuple[str, dict]]
) -> list[Email]:
    """The drafts as emails numbered by date (ties in random order); records each fact's ``source`` email id."""
    order = sorted(range(len(drafts)), key=lambda i: (drafts[i]["date"], float(rng.random())))
    ids = {old: new + 1 for new, old in enumerate(order)}
    emails = []
    for old in order:
        d = drafts[old]
        email = Email(
            ids[old],
            ids[d.get("thread_of", old)],
            d["sender"],
            d.get("recipients", owner),
            d["date"],
            d["subject"],
            d["body"],
            tuple(d.get("attachments", ())),
        )
        emails.append(email)
        if "fact" in d:
            facts[d["fact"]][1]["source"] = email.id
    return emails


def _database(emails: list[Email]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute(
        "CREATE TABLE emails (id INTEGER PRIMARY KEY, thread INTEGER, sender TEXT, recipients TEXT, "
        "date TEXT, subject TEXT, body TEXT, attachments TEXT)"
    )
    db.execute(
        "CREATE VIRTUAL TABLE emails_fts USING fts5(subject, body, attachments, content='emails', content_rowid='id')"
    )
    db.executemany(
        "INSERT INTO emails VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(e.id, e.thread, e.sender, e.recipients, e.date, e.subject, e.body, " ".join(e.attachments)) for e in emails],
    )
    db.execute(
        "INSERT INTO emails_fts(rowid, subject, body, attachments) SELECT id, subject, body, attachments FROM emails"
    )
    return db


QUESTION_KINDS = ("flight", "invoice", "meeting", "delivery", "attachment", "unanswerable")


def make_question(inbox: Inbox, rng: np.random.Generator, unanswerable_rate: float = 0.2) -> InboxQuestion:
    """A question about one fact of the inbox, or (at ``unanswerable_rate``) one the inbox cannot answer."""
    if rng.random() < unanswerable_rate:
        missing = [c for c in CITIES if not any(k == "flight" and f["city"] == c for k, f in inbox.facts)]
        city = _pick(rng, tuple(missing))
        return InboxQuestion(f"What is the confirmation code of my flight to {city}?", None, (), "unanswerable")
    kind, fact = inbox.facts[int(rng.integers(len(inbox.facts)))]
    text = {
        "flight": f"What is the confirmation code of my flight to {fact.get('city')}?",
        "invoice": f"What is the amount of invoice {fact.get('number')} from {fact.get('company')}?",
        "meeting": f"In which room is the {fact.get('project')} kickoff meeting?",
        "delivery": f"What is the tracking number of my {fact.get('shop')} order?",
        "attachment": f"What is the name of the file {fact.get('person')} sent me for {fact.get('project')}?",
    }[kind]
    same = [f for k, f in inbox.facts if k == kind and _question_key(kind, f) == _question_key(kind, fact)]
    if len(same) > 1:  # the same question would have two answers: ask about the latest one
        fact = max(same, key=lambda f: f["source"])
        text = text.rstrip("?") + " (the most recent one)?"
    return InboxQuestion(text, fact["answer"], (fact["source"],), kind)


def _question_key(kind: str, fact: dict) -> tuple:
    return tuple(fact.get(k) for k in ("city", "number", "company", "project", "shop", "person"))
