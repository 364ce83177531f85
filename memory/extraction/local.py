"""The local extractor: ``extract_local(user_text, assistant_text)``, the deterministic default.

It reads only what the user stated about themselves, sentence by sentence and clause by clause,
and turns each match into one standalone statement about "User" in the user's own words: the
first-person subject becomes "User" ("I prefer window seats" → "User prefers window seats", "my
name is Ada" → "User's name is Ada", "I'm a nurse" → "User is a nurse") and the other first-person
words of the clause become they / them / their ("I like my coffee black" → "User likes their
coffee black"). Relative times are kept as said ("User bought a bike yesterday"); the memory's
``observed_at``, the date of the turn it came from, dates them. One exception, given that date: a
change in the user's life said with its time (a move, a new job, pet, partner or child) is written
as what is true now, in the words a question about it will use, with the month it happened and
the words it was said in ("I moved to Lisbon last month" → "User lives in Lisbon (moved there in
February 2025)"). A move said without its time is where the user lives now too ("I moved to
Lisbon" → "User lives in Lisbon (moved there)"). A move or a new job then supersedes the user's
older home or job, and a present state said plainly ("I live in Berlin now", "I work at Acme as
a nurse") those naming another place or employer (``current_fact``, ``topic_of``,
``same_subject``, ``memory.extraction.planning``).

What it reads: names, what the user is ("I'm a nurse", "I'm fluent in Greek"), where they live and
work, what they have, like and dislike, dated events ("I'm flying to Oslo next Tuesday"), stable
habits and abilities in the present ("I drive a Volvo", "I play the cello", "I speak Polish", "I
don't drive", "I can't swim"), life facts in the past that need no date ("I studied geology",
"I moved to Lisbon", "I used to live in Rome") and long-standing ones ("I've lived here for ten
years"). A one-off past action still needs its time ("I bought a bike" alone is not kept).

Skipped: questions (a sentence ending in "?"), hypotheticals and guesses (if, suppose, imagine,
would, could, might, maybe, should, wish, planning to, ...; "I think", "I guess"), quoted or
reported speech, a habit verb about the conversation or the moment ("I use your app and it
crashes", "I take a look", "I drink coffee right now"), and statements about other people ("my
wife is a doctor", "he likes jazz") unless the user explicitly asks to remember them ("remember
that my wife is vegetarian"). The assistant's text is never read: it is accepted so that both
extractors share a call shape. English only; anything it doesn't recognise is left out rather
than guessed. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta

from memory.extraction.types import SUPERSEDING_TOPICS, ExtractedMemory, MemoryKind
from memory.reflection import normalise_text

MAX_MEMORY_CHARS = 300  # a longer clause is not a crisp memory: the local extractor skips it

_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTH = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)"
)
_PERIOD = (
    rf"(?:morning|afternoon|evening|night|week|weekend|month|year|summer|winter|spring|fall"
    rf"|autumn|semester|term|{_WEEKDAY})"
)
_ORDINAL = r"\d{1,2}(?:st|nd|rd|th)?"
_COUNT = r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a\s+few|few|a\s+couple\s+of|couple\s+of|several)"
_UNIT = r"(?:hours?|days?|weeks?|months?|years?)"

TIME = re.compile(
    rf"""\b(?:
        yesterday | today | tonight | tomorrow | recently
      | (?:this|last|next|coming)\s+{_PERIOD}
      | (?:on|by|until|till|since|before|after)\s+(?:the\s+)?{_WEEKDAY}s?
      | (?:in|on|by|until|since|during|early|late|mid|before|after)[\s-]+{_MONTH}
      | {_MONTH}\s+{_ORDINAL}
      | {_ORDINAL}\s+(?:of\s+)?{_MONTH}
      | on\s+the\s+{_ORDINAL}
      | {_COUNT}\s+{_UNIT}\s+ago
      | in\s+{_COUNT}\s+{_UNIT}
      | (?:earlier|later)\s+(?:today|tonight|this\s+(?:week|month|year))
      | (?:in|since|during)\s+(?:19|20)\d\d
      | (?:on|by)\s+\d{{1,4}}[/.-]\d{{1,2}}(?:[/.-]\d{{1,4}})?
      | at\s+\d{{1,2}}(?::\d{{2}})?\s*(?:am|pm)
      | at\s+\d{{1,2}}:\d{{2}}
      | over\s+the\s+weekend
    )\b""",
    re.IGNORECASE | re.VERBOSE,
)

# Whole sentences skipped: hypotheticals, guesses, wishes, plans not yet made.
HYPOTHETICAL = re.compile(
    r"\b(?:if|suppose|supposing|imagine|imagining|assume|assuming|pretend|hypothetically|unless"
    r"|in\s+case|wish|wished|would(?!\s+rather)|could|might|should|maybe|perhaps|probably"
    r"|possibly|someday|let'?s\s+say|say\s+i|were\s+i|what\s+if|thinking\s+(?:about|of)"
    r"|considering|planning|plan\s+to|hoping|hope)\b",
    re.IGNORECASE,
)
QUOTES = re.compile(r"[\"“”«»„]")
# Clauses skipped: guesses and someone else's words.
HEDGE = re.compile(
    r"^(?:i\s+(?:think|guess|believe|suppose|feel\s+like|reckon|wonder|doubt)\b"
    r"|i(?:'m|\s+am)\s+not\s+sure\b|not\s+sure\b)",
    re.IGNORECASE,
)
REPORTED = re.compile(
    r"\b(?:he|she|they|someone|somebody|everyone|everybody|people|my\s+\w+|his|her|their)\s+"
    r"(?:said|says|told|tells|thinks|think|believes|believe|claims|claimed|mentioned)\b",
    re.IGNORECASE,
)

SENTENCE_BREAK = re.compile(r"(?<=[.!?…])\s+|[\r\n]+|;\s*")
_FIRST_PERSON_AHEAD = r"(?=(?:i|my)\b)"
# After a lead-in and a colon ("Quick one: remember that ...", "Fun fact: I ..."), a statement.
_STATEMENT_AHEAD = (
    r"(?=(?:i|my|remember|please|don't\s+forget|do\s+not\s+forget|keep\s+in\s+mind|call\s+me)\b)"
)
CLAUSE_BREAK = re.compile(
    rf"\s*,?\s+(?:and|but|so|plus|although|though|while|whereas|because)\s+{_FIRST_PERSON_AHEAD}"
    rf"|\s*,\s*{_FIRST_PERSON_AHEAD}|\s+[-\u2013\u2014]+\s+|:\s+{_STATEMENT_AHEAD}",
    re.IGNORECASE,
)
LEADING_FILLER = re.compile(
    r"^(?:(?:oh|ah|well|also|btw|by\s+the\s+way|actually|fyi|fwiw|just\s+so\s+you\s+know"
    r"|for\s+the\s+record|for\s+context|fun\s+fact|so|anyway|anyways|and|but|plus|hey|hi|hello"
    r"|yes|yeah|yep|no|nope|ok|okay|sure|thanks|thank\s+you|honestly|basically)\b[\s,:!.-]*)+",
    re.IGNORECASE,
)
TRAILING_PUNCTUATION = re.compile(r"[\s.!…,;:]+$")

_ADVERBS = (
    "really|also|absolutely|totally|actually|usually|always|generally|definitely|just|still"
    "|truly|mostly|honestly|recently|often|never|rarely|sometimes|seriously|genuinely|deeply"
    "|simply|especially|particularly|mainly|currently|now|already|finally|officially|so|very"
)
ADV = rf"(?:(?:{_ADVERBS})\s+)*"
I_AM = r"i(?:'m|\s+am)\s+"
I_HAVE = r"i(?:'ve|\s+have)\s+"


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


EVENT_NOUNS = (
    "flight|appointment|meeting|interview|trip|wedding|exam|vacation|holiday|surgery|reservation"
    "|train|deadline|party|concert|booking|move|operation|checkup|check-up|visit|date|game|match"
)
PEOPLE = _word_set(
    "wife husband partner boyfriend girlfriend fiance fiancee spouse friend friends mom mum mother"
    " dad father parents parent son daughter sons daughters kid kids child children baby brother"
    " brothers sister sisters sibling siblings grandma grandmother grandpa grandfather"
    " grandparents aunt uncle cousin nephew niece boss manager colleague colleagues coworker"
    " coworkers roommate neighbor neighbour teacher doctor family team client"
    " customer landlord he she they him her them"
)
MY_STOP = _word_set(
    "question questions problem issue point guess bad pleasure concern request answer code message"
    " mistake apologies apology error output prompt idea thought"
)
NAME_STOP = _word_set(
    "ok okay sorry fine good great back here done ready home tired hungry sure new lost confused"
    " in out well glad happy sad busy free alright"
)
OBJECT_PRONOUNS = _word_set("it that this them these those him her you your yours")
HAVE_STOP = re.compile(
    r"^(?:to|been|had|got\s+to|gotten|done|seen|gone|made|taken|tried|just|already|never|ever"
    r"|always|not|no\s+idea|nothing|it|that|this|(?:a|an|one|another|some|two|few|a\s+few)"
    r"\s+(?:quick\s+|small\s+|follow-up\s+|more\s+)?(?:questions?|problems?|issues?|doubts?"
    r"|ideas?|feeling|request|suggestion|thought|bug|error))\b",
    re.IGNORECASE,
)
EVENT_STOP = re.compile(
    r"^(?:trouble|a\s+hard\s+time|problems?|issues?|difficulty|difficulties|a\s+bad\s+day)\b",
    re.IGNORECASE,
)
_PAST_VERBS = (
    "bought|moved|visited|started|booked|ordered|purchased|got|joined|left|quit|finished"
    "|graduated|adopted|began|returned|arrived|flew|travell?ed|went|signed\\s+up|sold|rented"
    "|married|celebrated|completed|switched|changed|lost|won|attended|received|paid|reserved"
    "|scheduled|cancell?ed|ran|had|saw|met|took|tried|watched|passed|failed|retired|hired"
    "|renewed|registered|enrolled|upgraded|downgraded"
)
_GOING_VERBS = (
    "going|flying|traveling|travelling|moving|driving|heading|visiting|starting|leaving|attending"
    "|taking|having|getting|seeing|meeting|celebrating|hosting|running|doing|returning|coming"
)
# Stable facts the user states in the present: what they drive, own, play, speak, do as a habit.
_HABIT_VERBS = (
    "drive|own|play|speak|use|ride|wear|collect|grow|keep(?!\\s+\\w+ing\\b)|raise|breed|teach|coach|train|tutor"
    "|volunteer|practi[cs]e|support|follow|read|write|knit|crochet|sew|paint|draw|sing|bake|cook"
    "|brew|run|manage|lead|take|rent|commute|attend|eat|drink|meditate|swim|cycle|climb|surf|ski"
    "|snowboard|skate|hike|garden|fish|dance|code|program|study|learn|work|live|sleep"
    "|wake\\s+up|get\\s+up|go\\s+to|listen\\s+to|belong\\s+to|identify\\s+as|go\\s+by"
)
# What the user can or cannot do.
_ABILITY_VERBS = (
    "speak|drive|play|swim|cook|read|write|code|program|sing|dance|ski|surf|ride|knit|sew|draw"
    "|paint|type|juggle|skate|cycle|eat|drink"
)
# Life facts said in the past that stay true without a date: where the user studied, lived,
# worked, what they became. (A one-off past action, "I bought a bike", still needs its time.)
_LIFE_VERBS = (
    "studied|majored\\s+in|minored\\s+in|graduated\\s+(?:from|in|with)|trained\\s+(?:as|in)"
    "|qualified\\s+as|worked\\s+(?:as|at|for|in)|lived\\s+(?:in|abroad|alone|with|on|near|by)"
    "|moved\\s+(?:to|from|here|there|abroad|back|away|out|house|flats?|home|countries|cities)"
    "|relocated\\s+to|emigrated|immigrated|grew\\s+up|was\\s+born|went\\s+to\\s+(?:school|university"
    "|college|uni|high\\s+school|law\\s+school|med(?:ical)?\\s+school|grad\\s+school)"
    "|got\\s+(?:married|divorced|engaged)|used\\s+to|retired|learned|learnt|taught\\s+myself"
    "|served\\s+in|became|converted\\s+to|gave\\s+up|(?:stopped|quit)\\s+\\w+ing"
)
# "I've ..." with how long: "I've lived here for ten years", "I've been vegan since 2019".
_HAVE_VERBS = (
    "been|lived|worked|studied|played|spoken|owned|driven|known|practi[cs]ed|taught|used"
    "|followed|supported|collected|ridden|run|kept|grown|volunteered|coached|trained"
)
DURATION = re.compile(
    r"\b(?:for\s+(?:(?:over|almost|nearly|about|around|more\s+than)\s+)?(?:\w+\s+){0,2}"
    r"(?:years?|months?|decades?|ages|a\s+while|a\s+long\s+time)|since\s+\w+|all\s+my\s+life"
    r"|my\s+(?:whole|entire)\s+life|most\s+of\s+my\s+life)\b",
    re.IGNORECASE,
)
# A habit or life clause about the conversation rather than the user: trouble with something,
# or the assistant and its words ("I use your app and it crashes", "I read your answer").
TROUBLE = re.compile(
    r"\b(?:you|your|yours|error|errors|bug|bugs|fails?|failed|failing|crash(?:es|ed|ing)?|broken"
    r"|doesn't\s+work|does\s+not\s+work|isn't\s+working|not\s+working|won't|stuck)\b",
    re.IGNORECASE,
)
# A present-tense clause about this moment is not a habit ("I drink coffee right now").
NOW = re.compile(
    r"\b(?:right\s+now|now|today|tonight|at\s+the\s+moment|this\s+(?:morning|afternoon|evening))\b",
    re.IGNORECASE,
)
# A life verb that says everything alone: "I retired", "I got married".
COMPLETE_LIFE = re.compile(
    r"(?:retired|emigrated|immigrated|got\s+(?:married|divorced|engaged)|grew\s+up|\w+ing"
    r"|moved\s+(?:here|there|abroad|back|away|house|flats?|home|countries|cities))$",
    re.IGNORECASE,
)
# "I've been waiting for ages" is about the conversation, not a long-standing fact.
HAVE_FOR_STOP = re.compile(
    r"^(?:waiting|trying|looking|struggling|having|stuck|sitting|searching|thinking|wondering"
    r"|meaning|asking|working\s+on|dealing\s+with|fighting\s+with|here)\b",
    re.IGNORECASE,
)
# Objects that make a habit verb a figure of speech or a moment ("I take a look", "I run out of
# ideas", "I go to bed"), or point back at the conversation ("I became curious about it").
HABIT_OBJECT_STOP = re.compile(
    r"^(?:up|along|through|into|out\s+of|somewhere|bed|a\s+lot\b|a\s+(?:look|break|moment|second"
    r"|minute|step|note|guess|blank|shower|bath|nap)|care|notes?|think|believe|wonder|feel|guess"
    r"|(?:to|with|for|about|at|on|in)\s+(?:it|this|that|them))\b",
    re.IGNORECASE,
)
POINTS_BACK = re.compile(r"\b(?:about|of|with|on|in|for|to)\s+(?:it|this|that)$", re.IGNORECASE)
_WILL_VERBS = (
    "be\\s+(?:in|at|away|out|on|visiting|flying|traveling|travelling|moving|starting|leaving)"
    "|go|fly|travel|move|visit|start|leave|attend|return|arrive"
)


@dataclass(frozen=True)
class Rule:
    """A clause shape: ``pattern`` (anchored, case-insensitive) and the kind of what it states."""

    name: str
    pattern: re.Pattern[str]
    kind: MemoryKind
    needs_time: bool = False


def _rule(name: str, pattern: str, kind: MemoryKind, *, needs_time: bool = False) -> Rule:
    return Rule(name, re.compile(rf"^{pattern}$", re.IGNORECASE), kind, needs_time)


# In order: the first that matches (and passes its check) decides.
RULES: tuple[Rule, ...] = (
    _rule("name", r"my\s+name(?:\s+is|'s)\s+(?P<x>.+)", "fact"),
    _rule("call_me", r"(?:you\s+can\s+|please\s+)?call\s+me\s+(?P<x>.+)", "fact"),
    # events: a time is required
    _rule("did", rf"i\s+{ADV}(?:{_PAST_VERBS})\b\s*(?P<x>.*)", "event", needs_time=True),
    _rule("have_done", rf"{I_HAVE}{ADV}(?:{_PAST_VERBS})\b\s*(?P<x>.*)", "event", needs_time=True),
    _rule("going", rf"{I_AM}{ADV}(?:{_GOING_VERBS})\b\s*(?P<x>.*)", "event", needs_time=True),
    _rule(
        "will",
        rf"i(?:'ll|\s+will)\s+{ADV}(?:{_WILL_VERBS})\b\s*(?P<x>.*)",
        "event",
        needs_time=True,
    ),
    # preferences
    _rule(
        "likes",
        rf"i\s+{ADV}(?:like|love|prefer|enjoy|adore|hate|dislike|detest|loathe|despise)\s+(?P<x>.+)",
        "preference",
    ),
    _rule(
        "dislikes",
        rf"i\s+{ADV}(?:don't|dont|do\s+not|never|can't|cannot|can\s+not)\s+{ADV}"
        r"(?:like|love|enjoy|eat|drink|stand|tolerate|bear)\s+(?P<x>.+)",
        "preference",
    ),
    _rule("rather", r"i(?:'d|\s+would)\s+rather\s+(?P<x>.+)", "preference"),
    _rule(
        "fan",
        rf"{I_AM}(?:not\s+)?(?:a\s+)?(?:(?:big|huge|great)\s+)?fan\s+of\s+(?P<x>.+)",
        "preference",
    ),
    _rule("into", rf"{I_AM}{ADV}into\s+(?P<x>.+)", "preference"),
    # facts
    _rule("is_a", rf"{I_AM}(?:a|an)\s+(?!(?:bit|little|lot|tad|few)\b)(?P<x>.+)", "fact"),
    _rule(
        "is_state",
        rf"{I_AM}{ADV}(?P<x>(?:from|based\s+in|originally\s+from|allergic\s+to|intolerant\s+to"
        r"|vegetarian|vegan|pescatarian|married|single|divorced|engaged|widowed|retired|pregnant"
        r"|unemployed|self-employed|left-handed|right-handed|lactose[\s-]+intolerant"
        r"|gluten[\s-]+intolerant|diabetic|colou?r[\s-]?blind|learning|studying|\d{1,3}\b"
        r"|fluent\s+in|bilingual|trilingual|multilingual|afraid\s+of|scared\s+of|terrified\s+of"
        r"|training\s+for|(?:good|bad|terrible|great)\s+at|(?:short|near|far)[\s-]?sighted|deaf"
        r"|blind|hard\s+of\s+hearing|an?\s+only\s+child|an?\s+(?:twin|vegetarian|vegan)"
        r"|(?:living|working|staying)\s+(?:in|at|for|as|near|from))\b.*)",
        "fact",
    ),
    _rule(
        "interested",
        rf"{I_AM}{ADV}(?:not\s+)?{ADV}(?:interested\s+in|passionate\s+about|obsessed\s+with"
        r"|crazy\s+about|keen\s+on|fond\s+of|hooked\s+on|addicted\s+to)\s+(?P<x>.+)",
        "preference",
    ),
    _rule("is_name", rf"{I_AM}(?P<x>[a-z][\w'-]*(?:\s+[a-z][\w'-]*)?)", "fact"),
    _rule(
        "lives",
        rf"i\s+{ADV}(?:live|work|study|stay|reside)\s+(?:in|at|for|as|near|from|on)\s+(?P<x>.+)",
        "fact",
    ),
    _rule("born", r"i\s+(?:was\s+born|grew\s+up)\s+(?:in|on|at)\s+(?P<x>.+)", "fact"),
    _rule(
        "habit",
        rf"i\s+{ADV}(?P<neg>(?:don't|dont|do\s+not)\s+{ADV})?(?:{_HABIT_VERBS})\b\s*(?P<x>.*)",
        "fact",
    ),
    _rule(
        "can",
        rf"i\s+{ADV}can(?:'t|not|\s+not)?\s+{ADV}(?:{_ABILITY_VERBS})\b\s*(?P<x>.*)",
        "fact",
    ),
    _rule("life", rf"i\s+{ADV}(?P<verb>{_LIFE_VERBS})\b\s*(?P<x>.*)", "fact"),
    _rule("have_for", rf"{I_HAVE}{ADV}(?:{_HAVE_VERBS})\b\s*(?P<x>.+)", "fact"),
    _rule("has", rf"{I_HAVE}(?:got\s+)?{ADV}(?P<x>.+)", "fact"),
    _rule("my_is", r"my\s+(?P<attr>[\w' -]{1,60}?)(?:\s+(?:is|are)|'s)\s+(?P<x>.+)", "fact"),
)

REMEMBER = re.compile(
    r"^(?:please\s+)?(?P<how>remember|don't\s+forget|do\s+not\s+forget|keep\s+in\s+mind)"
    r"(?:\s+that\b|\s*:)?\s*(?P<x>.+)$",
    re.IGNORECASE,
)


def extract_local(
    user_text: str, assistant_text: str = "", observed_at: datetime | None = None
) -> list[ExtractedMemory]:
    """The facts, preferences and events the user stated about themselves, in the order stated,
    each once. Deterministic; ``assistant_text`` is ignored (see the module doc). With the turn's
    date (``observed_at``), a dated change in the user's life is written as what is true now
    (``current_fact``)."""
    del assistant_text  # never read: only what the user said about themselves becomes a memory
    found: list[ExtractedMemory] = []
    seen: set[str] = set()
    for sentence in sentences(user_text):
        if skip_sentence(sentence):
            continue
        for clause in clauses(sentence):
            memory = extract_clause(clause)
            # without the turn's date, only a clause kept already can be a change (undated)
            changes = memory is not None or observed_at is not None
            current = current_fact(clause, observed_at) if changes else None
            if memory is None and (current is None or current[1] != "pet"):
                continue  # "we adopted a dog": the household's pet is the user's too
            if current is not None:
                memory = ExtractedMemory(current[0], "fact", topic=current[1], change=True)
            if memory is None:
                continue
            if memory.topic is None and memory.kind == "fact":
                # the present state ("I live in Berlin now"): it replaces an older home or job
                # that names another place or employer
                memory = replace(memory, topic=topic_of(memory.content))
            key = normalise_text(memory.content)
            if key not in seen:
                seen.add(key)
                found.append(memory)
    return found


def sentences(text: str) -> list[str]:
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    return [part.strip() for part in SENTENCE_BREAK.split(text) if part and part.strip()]


def skip_sentence(sentence: str) -> bool:
    """Questions, hypotheticals and quoted speech are never memories."""
    return (
        sentence.rstrip(" )\"'”»").endswith("?")
        or HYPOTHETICAL.search(sentence) is not None
        or QUOTES.search(sentence) is not None
    )


def clauses(sentence: str) -> list[str]:
    parts = (LEADING_FILLER.sub("", part.strip()) for part in CLAUSE_BREAK.split(sentence))
    cleaned = (TRAILING_PUNCTUATION.sub("", part) for part in parts)
    return [part for part in cleaned if part]


def extract_clause(clause: str) -> ExtractedMemory | None:
    """One clause → one memory, or None when it states nothing about the user."""
    if HEDGE.match(clause) or REPORTED.search(clause):
        return None
    remembered = REMEMBER.match(clause)
    if remembered:
        return _remembered(remembered.group("how"), remembered.group("x"))
    for rule in RULES:
        match = rule.pattern.match(clause)
        if match is None or not _passes(rule, match, clause):
            continue
        content = statement(clause)
        if content is None or len(content) > MAX_MEMORY_CHARS:
            return None
        return ExtractedMemory(content, _kind(rule, match, clause))
    return None


def _passes(rule: Rule, match: re.Match[str], clause: str) -> bool:
    x = match.group("x").strip()
    first = x.split()[0].lower().rstrip(",.") if x else ""
    if rule.needs_time:  # "I got it yesterday" is about something else
        return (
            TIME.search(clause) is not None
            and first not in OBJECT_PRONOUNS
            and not (rule.name == "going" and EVENT_STOP.match(x))
        )
    if rule.name in STABLE_FACT_RULES:  # some say all without an object: "I don't drive"
        return _stable_fact(rule.name, match, x, first, clause)
    if not re.search(r"\w", x):
        return False
    if rule.name in {"likes", "dislikes"}:
        # "I love it" / "I like your answer" are about the reply; "I like it when ..." is a preference
        return first not in OBJECT_PRONOUNS or x.lower().startswith("it when")
    if rule.name == "lives":
        return first not in OBJECT_PRONOUNS
    if rule.name == "call_me":
        return _looks_like_name(x, max_words=3)
    if rule.name == "is_name":
        return _looks_like_name(x, max_words=2)
    if rule.name == "has":
        return HAVE_STOP.match(x) is None and not _participle(first)
    if rule.name == "my_is":
        return _about_the_user(match.group("attr"))
    return True


STABLE_FACT_RULES = frozenset({"habit", "can", "life", "have_for"})


def _stable_fact(name: str, match: re.Match[str], x: str, first: str, clause: str) -> bool:
    """A habit, an ability, a life fact or a long-standing one, and not the conversation's own
    business ("I use your app and it crashes", "I follow", "I've been waiting for ages")."""
    if (
        first in OBJECT_PRONOUNS
        or TROUBLE.search(x)
        or HABIT_OBJECT_STOP.match(x)
        or POINTS_BACK.search(x)
    ):
        return False
    if name == "habit":  # "I don't drive" says all; "I follow" alone is agreement
        return bool(x or match.group("neg") or re.search(r"\bnever\b", clause, re.IGNORECASE)) and (
            NOW.search(x) is None
        )
    if name == "life":
        return bool(x) or COMPLETE_LIFE.search(match.group("verb")) is not None
    if name == "have_for":
        return DURATION.search(x) is not None and HAVE_FOR_STOP.match(x) is None
    return True


def _looks_like_name(text: str, *, max_words: int) -> bool:
    words = text.split()
    return (
        0 < len(words) <= max_words
        and all(word[0].isupper() for word in words)
        and words[0].lower() not in NAME_STOP
    )


def _participle(word: str) -> bool:
    return word.endswith("ed") and word not in {"red", "bed", "need", "seed", "speed", "breed"}


def _about_the_user(attribute: str) -> bool:
    """``my <attribute> is ...`` is about the user unless the attribute names someone else."""
    words = [word.removesuffix("'s") for word in attribute.lower().split()]
    return bool(words) and words[0] not in MY_STOP and not any(word in PEOPLE for word in words)


def _kind(rule: Rule, match: re.Match[str], clause: str) -> MemoryKind:
    if rule.name == "my_is":
        attribute = match.group("attr").lower()
        if re.search(rf"\b(?:{EVENT_NOUNS})$", attribute):
            return "event"
        if re.search(r"\b(?:favou?rite|preferred)\b", attribute):
            return "preference"
    if rule.name == "has" and TIME.search(clause):
        head = rf"^(?:a|an|my|the|another)\s+(?:[\w-]+\s+)?(?:{EVENT_NOUNS})\b"
        if re.search(head, match.group("x"), re.IGNORECASE):
            return "event"
    return rule.kind


def _remembered(how: str, inner: str) -> ExtractedMemory | None:
    """``remember that ...``: the inner statement if it is one; else, for an explicit "remember"
    or "don't forget", a note of what the user asked to remember."""
    inner = TRAILING_PUNCTUATION.sub("", LEADING_FILLER.sub("", inner.strip()))
    if not inner or re.match(r"^(?:to|when|how|what|me|us|this|that|it)\b", inner, re.IGNORECASE):
        return None
    memory = extract_clause(inner)
    if memory is not None:
        return memory
    if re.match(r"^(?:i|my)\b", inner, re.IGNORECASE):
        content = statement(inner)
    elif how.lower().startswith("keep"):
        return None
    else:
        content = "User asked to remember that " + third_person_rest(inner)
    if content is None or len(content) > MAX_MEMORY_CHARS:
        return None
    return ExtractedMemory(content, "fact")


# --------------------------------------------------------------------------------------------
# First person → a statement about "User".

_IRREGULAR = {
    "have": "has",
    "do": "does",
    "go": "goes",
    "am": "is",
    "be": "is",
    "don't": "doesn't",
    "dont": "doesn't",
    "haven't": "hasn't",
    "havent": "hasn't",
}
_UNCHANGED = _word_set(
    "can can't cannot could couldn't will won't would wouldn't shall should shouldn't may might"
    " must was wasn't did didn't had hadn't bought got went left began flew met sold won lost paid"
    " quit ran saw made took read wrote came found gave grew knew spent told thought brought built"
    " felt kept heard put set cut let hurt hit sat slept ate drank drove rode swam broke chose"
    " forgot taught caught fought sent spoke stood understood wore became never learnt dreamt"
)


def conjugate(verb: str) -> str:
    """The third-person singular of a first-person verb ("prefer" → "prefers")."""
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower in _UNCHANGED or lower.endswith("ed"):
        return verb
    if re.search(r"(?:s|sh|ch|x|z|o)$", lower):
        return verb + "es"
    if re.search(r"[^aeiou]y$", lower):
        return verb[:-1] + "ies"
    return verb + "s"


_SUBJECTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), replacement)
    for pattern, replacement in (
        (r"^my\s+name(?:'s|\s+is)\b", "User's name is"),
        (r"^my\b", "User's"),
        (r"^(?:you\s+can\s+|please\s+)?call\s+me\b", "User wants to be called"),
        (r"^i(?:'m|\s+am)\b", "User is"),
        (r"^i(?:'ve|\s+have)\b", "User has"),
        (r"^i(?:'d|\s+would)\b", "User would"),
        (r"^i(?:'ll|\s+will)\b", "User will"),
    )
)
_I_VERB = re.compile(rf"^i\s+(?P<adv>{ADV})(?P<verb>[a-z][\w']*)", re.IGNORECASE)


def statement(clause: str) -> str | None:
    """ "I prefer aisle seats" → "User prefers aisle seats"; None if the subject isn't "I"/"my"."""
    for pattern, replacement in _SUBJECTS:
        match = pattern.match(clause)
        if match:
            return replacement + third_person_rest(clause[match.end() :])
    match = _I_VERB.match(clause)
    if match is None:
        return None
    head = f"User {match.group('adv')}{conjugate(match.group('verb'))}"
    return head + third_person_rest(clause[match.end() :])


# A word that starts a clause, kept as group 1: "I" is replaced only after one of them, so "World
# War I" stays as it is.
_CLAUSE_START = (
    r"(?i:\b((?:where|when|that|because|and|but|so|as|than|since|which|who|before|after"
    r"|until|while|whenever|wherever|once)\s+))"
)
_PRONOUNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"\b[Mm]yself\b", "themselves"),
        (r"\b[Mm]ine\b", "theirs"),
        (r"\b[Mm]y\b", "their"),
        (r"\b[Mm]e\b", "them"),
        (_CLAUSE_START + r"(?:I|i)(?:'m|\s+am)\b", r"\1they're"),
        (_CLAUSE_START + r"(?:I|i)\s+was\b", r"\1they were"),
        (_CLAUSE_START + r"(?:I|i)(?='|\b)", r"\1they"),
    )
)


def third_person_rest(text: str) -> str:
    """The first-person words after the subject: my → their, me → them, "where I" → "where
    they"."""
    for pattern, replacement in _PRONOUNS:
        text = pattern.sub(replacement, text)
    return text


# --------------------------------------------------------------------------------------------
# A change in the user's life, said with its time, restated as what is true now.
#
# A question asks about the present ("Where do I live?", "What do I do for work?", "Do I have
# pets?"), while the user tells the change ("I moved to Lisbon last month"). A statement in the
# question's words is found by it, so a dated change is written as the current fact with the
# month it happened, keeping the words it was said in ("User lives in Lisbon (moved there in
# March 2025)"); the turn's date resolves the relative time.

_MONTH_NAMES = (  # not calendar.month_name: that follows the process's locale
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTH_NUMBER = {name[:3].lower(): number for number, name in enumerate(_MONTH_NAMES, 1)}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_NUMBERS |= {"seven": 7, "eight": 8, "nine": 9, "ten": 10, "a few": 3, "few": 3, "several": 3}
_NUMBERS |= {"a couple of": 2, "couple of": 2}
_PETS = (
    r"(?:dog|puppy|cat|kitten|rabbit|bunny|hamster|guinea\s+pig|parrot|budgie|bird|turtle"
    r"|tortoise|fish|goldfish|horse|pony|ferret|gecko|lizard|snake|chicken|hen)s?"
)
# What "moved to" / "started at" also reach that is no home or job.
_NOT_A_PLACE = (
    r"(?:the\s+)?(?:[\w-]+\s+)?(?:shift|team|role|position|department|plan|tier|version"
    r"|stage|phase|level|class|group|league|side|front|back|top|bottom)\b"
)
_NOT_A_JOB = (
    r"(?:the\s+|a\s+new\s+)?(?:university|uni|college|school|high\s+school|kindergarten"
    r"|nursery|gym|beginning|bottom|top|start|end|\d)\b"
)
# (topic, pattern over the clause without its time, present-tense template)
_CHANGES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (topic, re.compile(pattern, re.IGNORECASE), template)
    for topic, pattern, template in (
        (
            "home",
            rf"^i\s+{ADV}(?P<verb>moved|relocated)\s+(?:back\s+)?(?:to|into)\s+(?!{_NOT_A_PLACE})"
            r"(?P<x>.+)$",
            "User lives in {x} ({verb} there{when})",
        ),
        (
            "work",
            rf"^i\s+{ADV}(?:started|began)\s+(?:a\s+new\s+job\s+|work(?:ing)?\s+)?"
            rf"(?P<x>(?:as|at)\s+(?!{_NOT_A_JOB}).+)$",
            "User works {x} (new job, started there{when})",
        ),
        (
            "work",
            rf"^i\s+{ADV}got\s+(?:a\s+(?:new\s+)?)?job\s+(?P<x>(?:as|at)\s+.+)$",
            "User works {x} (got the job{when})",
        ),
        (
            "work",
            # "I joined Deloitte" alone may be a club or a network; with the role it is a job
            rf"^i\s+{ADV}joined\s+(?P<at>(?!a\b|an\b|the\b)\S.*?)\s+(?P<x>as\s+(?:a|an)\s+.+)$",
            "User works {x} at {at} (new job, joined{when})",
        ),
        (
            "pet",
            rf"^(?:i|we)\s+{ADV}(?P<verb>adopted|got|bought)\s+(?P<x>(?:a|an|two|three|\d+)\s+(?:[\w-]+\s+)?{_PETS}\b.*)$",
            "User has {x} ({verb}{when})",
        ),
        (
            "partner",
            rf"^i\s+{ADV}got\s+(?P<x>married|engaged)(?P<rest>\s+to\s+.+)?$",
            "User is {x}{rest} (got {x}{when})",
        ),
        (
            "child",
            rf"^i\s+{ADV}had\s+(?P<x>(?:a|twin)\s+(?:baby|son|daughter|boy|girl|babies)\b.*)$",
            "User has {x} (born{when})",
        ),
    )
)


def current_fact(clause: str, observed_at: datetime | None) -> tuple[str, str] | None:
    """A change in the user's life (a move, a new job, pet, partner or child) as what is true
    now, and its topic; None for any other clause. Said with its time, the change needs the
    turn's date (``observed_at``) to say the month; said without one, only a move or a new job is
    rewritten ("I moved to Lisbon" → "User lives in Lisbon (moved there)"): where the user lives
    and what they do are what a later question asks, whenever the change happened."""
    clause = TRAILING_PUNCTUATION.sub("", LEADING_FILLER.sub("", clause.strip()))
    said = TIME.search(clause)
    if said is None:
        return _undated_change(clause)
    if observed_at is None:
        return None
    year = re.match(r",?\s+((?:19|20)\d\d)\b", clause[said.end() :])
    end = said.end() + (year.end() if year else 0)
    rest = clause[end:].strip(" ,")
    if rest and not re.match(r"^(?:for|with|because|after|to)\b", rest, re.IGNORECASE):
        return None  # more after the time than a reason: not a plain change
    bare = clause[: said.start()].rstrip(" ,")
    at = " " + when(said.group(0), year.group(1) if year else None, observed_at)
    return _change(bare, at, _CHANGES)


# What follows the place or job of an undated change without being part of it: its reason, its
# company, where from ("I moved to Lisbon for work", "... with my family", "... from Porto").
_AFTER_CHANGE = re.compile(
    r"\s+(?:for|with|because|after|to|from|since|when|so|as\s+(?!(?:a|an)\b))\b.*$",
    re.IGNORECASE,
)


def _undated_change(clause: str) -> tuple[str, str] | None:
    for topic, pattern, template in _CHANGES:
        match = pattern.match(clause) if topic in SUPERSEDING_TOPICS else None
        if match is None:
            continue
        # the place or the job alone: its reason or company are no part of where or what
        where = _AFTER_CHANGE.sub("", match.group("x"))
        if topic == "home" and not _named(where):
            return None  # "I moved to a new flat" says no place a later move could be told from
        return _change(clause[: match.start("x")] + where, "", ((topic, pattern, template),))
    return None


def _change(
    bare: str, at: str, changes: tuple[tuple[str, re.Pattern[str], str], ...]
) -> tuple[str, str] | None:
    for topic, pattern, template in changes:
        match = pattern.match(bare)
        if match is None:
            continue
        parts = {key: third_person_rest(value or "") for key, value in match.groupdict().items()}
        parts["x"] = parts["x"].strip()
        if not parts["x"] or parts["x"].split()[0].lower() in OBJECT_PRONOUNS:
            return None
        parts["when"] = at
        content = template.format(**parts)
        return (content, topic) if len(content) <= MAX_MEMORY_CHARS else None
    return None


def when(phrase: str, year: str | None, observed_at: datetime) -> str:
    """The time said, as the month it falls in ("in March 2025"), else as said."""
    text = re.sub(r"\s+", " ", phrase.lower())
    said = observed_at.date()

    def month_of(day: date) -> str:
        return f"in {_MONTH_NAMES[day.month - 1]} {day.year}"

    def months_back(count: int) -> str:
        index = said.year * 12 + said.month - 1 - count
        return f"in {_MONTH_NAMES[index % 12]} {index // 12}"

    if text in {"yesterday", "today", "tonight", "recently", "over the weekend"}:
        return month_of(said - timedelta(days=1 if text == "yesterday" else 0))
    if re.fullmatch(
        rf"(?:this|last) (?:week|weekend|{_WEEKDAY})|(?:on|since) (?:the )?{_WEEKDAY}s?", text
    ):
        return month_of(said - timedelta(days=7 if text.startswith("last") else 0))
    if text in {"this month", "earlier this month"}:
        return months_back(0)
    if text == "last month":
        return months_back(1)
    if text in {"this year", "earlier this year"}:
        return f"in {said.year}"
    if text == "last year":
        return f"in {said.year - 1}"
    ago = re.fullmatch(rf"({_COUNT}) ({_UNIT}) ago", text)
    if ago:
        count = int(ago.group(1)) if ago.group(1).isdigit() else _NUMBERS.get(ago.group(1), 0)
        unit = ago.group(2).rstrip("s")
        if count and unit in {"hour", "day", "week"}:
            days = {"hour": 0, "day": count, "week": 7 * count}[unit]
            return month_of(said - timedelta(days=days))
        if count and unit == "month":
            return months_back(count)
        if count and unit == "year":
            return f"in {said.year - count}"
    named = re.fullmatch(rf"(?:in|during|early|late|mid|since)[ -]({_MONTH})", text)
    if named:
        number = _MONTH_NUMBER[named.group(1)[:3]]
        in_year = int(year) if year else said.year - (number > said.month)
        return f"in {_MONTH_NAMES[number - 1]} {in_year}"
    said_year = re.fullmatch(r"(?:in|since|during) ((?:19|20)\d\d)", text)
    if said_year:
        return f"in {said_year.group(1)}"
    return phrase


# What an existing memory is the user's current state of, read from its words: a memory of where
# the user lives or what they work as, however it was written (by this extractor, the LLM one or
# by hand), is replaced by a new move or job.
_TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "home",
        re.compile(
            r"^User\s+(?:\w+ly\s+)?(?:lives\s+in|moved\s+(?:back\s+)?to|relocated\s+to"
            r"|is\s+(?:based|living)\s+in)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "work",
        re.compile(
            r"^User\s+(?:\w+ly\s+)?(?:works\s+(?:as|at|for)|started\s+(?:a\s+new\s+job\s+)?"
            r"(?:as|at)|is\s+working\s+(?:as|at|for)|joined\s+(?!a\b|an\b|the\b))",
            re.IGNORECASE,
        ),
    ),
)


def topic_of(content: str) -> str | None:
    """The topic (``home``, ``work``) a memory states the user's current state of, if any."""
    for topic, pattern in _TOPICS:
        if pattern.match(content):
            return topic
    return None


# A home or job stated in the present names its place or employer, which tells a new one from a
# restatement of the old: "User lives in Berlin now" replaces "User lives in Porto" and restates
# "User lives in Berlin (moved there in May 2024)".
_HOME_PLACE = re.compile(
    r"^User\s+(?:\w+ly\s+)?(?:lives\s+in|moved\s+(?:back\s+)?to|relocated\s+to"
    r"|is\s+(?:based|living)\s+in)\s+(?P<x>.+)$",
    re.IGNORECASE,
)
_WORK_PLACE = re.compile(
    r"^User\s+(?:\w+ly\s+)?(?:works|started(?:\s+a\s+new\s+job)?|is\s+working|joined)\s+(?P<x>.+)$",
    re.IGNORECASE,
)
_PART_END = (
    r"(?=\s+(?:as|at|for|with|since|and|but|in|on|from|near|because|now|currently|nowadays"
    r"|these\s+days|at\s+the\s+moment)\b|\s*[(,;]|$)"
)
_EMPLOYER = re.compile(rf"(?:^|\s)(?:at|for)\s+(?P<x>.+?){_PART_END}", re.IGNORECASE)
_JOINED = re.compile(rf"^User\s+(?:\w+ly\s+)?joined\s+(?P<x>.+?){_PART_END}", re.IGNORECASE)
_ROLE = re.compile(rf"(?:^|\s)as\s+(?:(?:a|an|the)\s+)?(?P<x>.+?){_PART_END}", re.IGNORECASE)
_PLACE = re.compile(rf"^(?P<x>.+?){_PART_END}", re.IGNORECASE)


# How a present state is said to be current, which says nothing beyond the state itself.
NOW_WORDS = re.compile(
    r"\s+(?:now|currently|nowadays|these\s+days|at\s+the\s+moment)\b", re.IGNORECASE
)


def _named(text: str) -> bool:
    """A proper name (Lisbon, the Netherlands, St Mary's), not a description (a new flat)."""
    words = re.sub(r"^the\s+", "", text.strip(), flags=re.IGNORECASE).split()
    return bool(words) and words[0][0].isupper()


def _part(pattern: re.Pattern[str], text: str, *, named: bool) -> str | None:
    match = pattern.search(TIME.sub("", text))
    if match is None or (named and not _named(match.group("x"))):
        return None
    value = re.sub(r"^the\s+", "", normalise_text(match.group("x")))
    return value or None


def _same(a: str | None, b: str | None) -> bool | None:
    """Whether two names are one ("st mary's" and "st mary's hospital" are); None without both."""
    if a is None or b is None:
        return None
    short, long = sorted((a.split(), b.split()), key=len)
    return long[: len(short)] == short


def same_subject(topic: str, content: str, other: str) -> bool | None:
    """Whether two memories of a ``topic`` name the same place (``home``) or employer, else role
    (``work``): True, False, or None when either names none that can be compared."""
    if topic == "home":
        places = []
        for text in (content, other):
            stated = _HOME_PLACE.match(text)
            places.append(_part(_PLACE, stated.group("x"), named=True) if stated else None)
        return _same(*places)
    if topic == "work":
        jobs = [_job(text) for text in (content, other)]
        employers = _same(jobs[0][0], jobs[1][0])
        return employers if employers is not None else _same(jobs[0][1], jobs[1][1])
    return None


def _job(content: str) -> tuple[str | None, str | None]:
    """The employer and the role a memory of the user's work names."""
    stated = _WORK_PLACE.match(content)
    if stated is None:
        return None, None
    employer = _part(_EMPLOYER, stated.group("x"), named=True)
    if employer is None and _JOINED.match(content):
        employer = _part(_JOINED, content, named=True)
    return employer, _part(_ROLE, stated.group("x"), named=False)
