"""The memory recall benchmark's former data (``BENCH_MEMORY_DATA=assistant``), kept to see whether
a change holds on another kind of conversation: a user talking with an assistant, every turn stored
as a memory, each question naming the turns that hold its answer (its evidence). Its small talk
repeats verbatim, so collapsing near-duplicates does more here than on real conversations.

Made here from fixed lists with a seeded ``random.Random``: no data set, no model, no download.
A conversation is several dated sessions of a user talking with an assistant. Facts about the
user are stated once, in passing and in the user's own words, among small talk; distractor turns
reuse a fact's words about someone else or another time. Questions are asked the way a later user
asks them: one sharing a word with the statement, one in other words altogether ("What is my dog called?" after "we finally brought
the little beagle home, we named him Biscuit"), and about when something happened (the answer is
the session's date, which the store keeps as the memory's ``observed_at``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class Fact:
    key: str
    statements: tuple[str, ...]  # "{v}" is the value
    questions: tuple[str, ...]  # phrased unlike the statements
    when: str  # a question about when it was said or happened
    distractors: tuple[str, ...]  # the fact's words about someone or something else
    values: tuple[str, ...]


FACTS: tuple[Fact, ...] = (
    Fact(
        "dog",
        (
            "we finally brought the little beagle home yesterday, we named him {v}",
            "honestly {v} chewed through another shoe this morning, puppies are a handful",
        ),
        ("What is my puppy called?", "What did I call the animal I adopted?"),
        "When did I get my puppy?",
        (
            "my neighbour walks her dog past our house every evening",
            "the vet clinic down the road has a dog adoption day",
        ),
        ("Biscuit", "Juniper", "Moose", "Waffles", "Pickle", "Nacho", "Olive", "Ziggy"),
    ),
    Fact(
        "job",
        (
            "first week at the new place went well, being a {v} there is less stressful",
            "I signed the contract today, starting as a {v} next month",
        ),
        ("What do I do at the new place?", "What kind of work have I been doing lately?"),
        "When did I start my current job?",
        (
            "my brother keeps complaining about his job at the bank",
            "there was a job fair downtown but I did not go",
        ),
        ("paramedic", "sommelier", "welder", "midwife", "cartographer", "pastry chef", "actuary"),
    ),
    Fact(
        "move",
        (
            "the boxes are all unpacked, {v} feels like home already",
            "we are moving to {v} at the end of the month, the lease is signed",
        ),
        ("Where did we sign the lease?", "Where is my new home?"),
        "When did I move house?",
        (
            "my cousin just got back from a holiday and would not stop talking about it",
            "moving boxes are so expensive these days",
        ),
        ("Halifax", "Porto", "Tartu", "Hobart", "Ljubljana", "Dunedin", "Valparaiso", "Bergen"),
    ),
    Fact(
        "allergy",
        (
            "ended up at urgent care after lunch, turns out I react badly to {v}",
            "the allergist confirmed it, {v} is off the menu for me from now on",
        ),
        ("What did the allergist say I must avoid?", "What ingredient makes me sick?"),
        "When did I find out about my food allergy?",
        (
            "my friend has hay fever every spring",
            "the restaurant menu listed every ingredient, which was nice",
        ),
        ("shellfish", "sesame", "kiwi", "walnuts", "mustard", "buckwheat", "lupin"),
    ),
    Fact(
        "instrument",
        (
            "I signed up for {v} lessons, the teacher says my posture is terrible",
            "practised the {v} for an hour tonight, my fingers hurt",
        ),
        ("What lessons am I taking?", "Which music lessons did I take up?"),
        "When did I begin my music lessons?",
        (
            "the concert in the park had a great brass band",
            "my daughter's school orchestra needs volunteers",
        ),
        ("cello", "banjo", "clarinet", "harp", "trombone", "ukulele", "oboe"),
    ),
    Fact(
        "car",
        (
            "traded in the old hatchback, now driving a {v}",
            "picked up the {v} from the dealership, it smells brand new",
        ),
        ("What did I get from the dealership?", "What did I buy to get around?"),
        "When did I buy my car?",
        (
            "the traffic on the ring road was terrible today",
            "my colleague's car broke down on the motorway",
        ),
        ("Volvo estate", "Subaru Outback", "Nissan Leaf", "Mini Cooper", "Kia Niro", "Fiat Panda"),
    ),
    Fact(
        "marathon",
        (
            "crossed the finish line of the {v} marathon, legs are jelly",
            "registered for the {v} marathon, training starts Monday",
        ),
        ("Which marathon am I doing?", "What running event did I enter?"),
        "When did I run the race?",
        (
            "the park run was cancelled because of the storm",
            "my running shoes are worn out",
        ),
        ("Berlin", "Chicago", "Lisbon", "Rotterdam", "Kyoto", "Boston", "Valencia"),
    ),
    Fact(
        "book",
        (
            "stayed up way too late finishing {v}, what an ending",
            "my book club picked {v} for this month, I am halfway through",
        ),
        ("What did my book club choose?", "Which story kept me awake at night?"),
        "When did I finish that novel?",
        (
            "the library fined me for a late return",
            "the bookshop on the corner is closing down",
        ),
        ("Middlemarch", "Piranesi", "Stoner", "Rebecca", "Beloved", "Kindred", "Solaris"),
    ),
    Fact(
        "partner",
        (
            "{v} proposed on the beach at sunset, I said yes",
            "dinner with {v} tonight, two years together already",
        ),
        ("Who proposed to me?", "What is my fiance's name?"),
        "When did I get engaged?",
        (
            "my sister's wedding planning is getting out of hand",
            "saw an old friend from school at the supermarket",
        ),
        ("Priya", "Tomasz", "Amara", "Lucas", "Ingrid", "Mateo", "Yuki"),
    ),
    Fact(
        "surgery",
        (
            "the orthopaedic team says my {v} needs surgery after the skiing fall",
            "physio for my {v} is slow going, still on crutches",
        ),
        ("What needs surgery after my fall?", "What did I hurt on the slopes?"),
        "When did I have my accident?",
        (
            "the hospital car park charges a fortune",
            "my grandfather had his hip replaced years ago",
        ),
        ("left knee", "right ankle", "shoulder", "wrist", "collarbone", "lower back"),
    ),
    Fact(
        "language",
        (
            "my {v} tutor made me order coffee in class today",
            "downloaded an app to practise {v} vocabulary on the train",
        ),
        ("What does my tutor teach me?", "What am I learning to speak?"),
        "When did I start studying the language?",
        (
            "the subtitles on that film were awful",
            "a tourist asked me for directions and I could not help",
        ),
        ("Portuguese", "Japanese", "Finnish", "Swahili", "Korean", "Greek", "Polish"),
    ),
    Fact(
        "garden",
        (
            "planted a row of {v} in the back garden this afternoon",
            "the {v} in my allotment are finally coming up",
        ),
        ("What did I plant in the garden?", "What did I sow in the vegetable patch?"),
        "When did I plant the vegetables?",
        (
            "the neighbours' hedge is blocking all the light",
            "the garden centre had a sale on patio furniture",
        ),
        ("tomatoes", "runner beans", "courgettes", "leeks", "pumpkins", "radishes"),
    ),
)

SMALL_TALK: tuple[str, ...] = (
    "it rained all day again, I did not leave the house",
    "can you suggest something quick for dinner tonight",
    "I watched a documentary about octopuses, fascinating creatures",
    "work was busy, lots of meetings that could have been emails",
    "what is a good way to fall asleep faster",
    "I am thinking about repainting the kitchen, any colour ideas",
    "the new coffee place near the station is pretty good",
    "my phone battery dies so quickly these days",
    "tell me a fun fact about space",
    "I spent the weekend cleaning out the attic",
    "any tips for keeping houseplants alive",
    "I tried a new recipe for lentil soup, it turned out fine",
    "the train was late again this morning",
    "I have a dentist appointment next week, not looking forward to it",
    "how do I get better at chess",
    "my laptop keeps making a strange noise",
    "we had a barbecue with friends, the weather held up",
    "I need a birthday present idea for my dad",
    "remind me how compound interest works",
    "I finally sorted out my taxes",
    "what are some good podcasts for a long drive",
    "the power went out for an hour last night",
    "I am trying to drink less coffee",
    "there is a film festival in town next month",
)

ASSISTANT: tuple[str, ...] = (
    "That sounds like quite a day.",
    "Happy to help with that.",
    "Good to hear, thanks for sharing.",
    "Here are a few ideas you could try.",
)


@dataclass
class Turn:
    text: str
    said_at: datetime


@dataclass
class Question:
    text: str
    evidence: set[int]  # indexes of the conversation's turns
    kind: str  # "paraphrase" or "when"


@dataclass
class Conversation:
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def conversation(rng: random.Random, sessions: int, turns_per_session: int) -> Conversation:
    """One user's sessions, a week or so apart, with each fact stated in one or two of them."""
    result = Conversation()
    start = datetime(2025, 1, 6, 9, tzinfo=UTC) + timedelta(days=rng.randrange(300))
    facts = rng.sample(FACTS, k=min(len(FACTS), 10))
    placed: dict[int, list[tuple[Fact, str, int]]] = {}
    for fact in facts:
        value = rng.choice(fact.values)
        for statement in rng.sample(range(len(fact.statements)), k=rng.choice((1, 2))):
            placed.setdefault(rng.randrange(sessions), []).append((fact, value, statement))
    evidence: dict[str, set[int]] = {}
    for session in range(sessions):
        day = start + timedelta(days=7 * session + rng.randrange(3))
        lines = [rng.choice(SMALL_TALK) for _ in range(turns_per_session)]
        for fact in rng.sample(facts, k=2):  # distractors share the facts' words
            lines[rng.randrange(len(lines))] = rng.choice(fact.distractors)
        slots = rng.sample(range(len(lines)), k=len(placed.get(session, [])))
        facts_here = {}
        for slot, (fact, value, statement) in zip(slots, placed.get(session, []), strict=True):
            lines[slot] = fact.statements[statement].format(v=value)
            facts_here[slot] = fact.key
        for index, line in enumerate(lines):
            if index in facts_here:
                evidence.setdefault(facts_here[index], set()).add(len(result.turns))
            result.turns.append(Turn(line, day + timedelta(minutes=3 * index)))
    for fact in facts:
        turns = evidence.get(fact.key)
        if not turns:
            continue
        for question in fact.questions:
            result.questions.append(Question(question, set(turns), "paraphrase"))
        result.questions.append(Question(fact.when, set(turns), "when"))
    return result


def conversations(
    count: int = 10, sessions: int = 12, turns_per_session: int = 20, seed: int = 7
) -> list[Conversation]:
    rng = random.Random(seed)
    return [conversation(rng, sessions, turns_per_session) for _ in range(count)]
