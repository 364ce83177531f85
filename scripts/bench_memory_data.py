"""Synthetic conversations for the memory benchmark: chit-chat with planted facts, and questions.

Everything is made here from fixed lists with a seeded ``random.Random``: no data set, no model.
A conversation is ``turns`` user messages, each answered by a few sentences of assistant small talk.
Some user turns carry a planted fact about the user, wrapped in chit-chat; after the conversation,
two questions per planted fact ask about it: one in other words than the statement, one that
turns the statement itself into a question. Half of the other turns state something
about the user too (a walk, a liking): the extractor turns most of those into memories, which
compete with the planted facts at recall.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class FactTemplate:
    key: str
    statement: str  # "{value}" is replaced
    question: str  # in other words than the statement
    direct: str  # the statement turned into a question
    values: tuple[str, ...]


# Statements as users make them. A planted fact the extractor never stores cannot be recalled, and
# the report counts those apart (scripts/bench_memory_extraction.py counts what each extractor
# stores).
FACTS: tuple[FactTemplate, ...] = (
    FactTemplate(
        "allergy",
        "I'm allergic to {value}.",
        "Is there any food I should avoid?",
        "What am I allergic to?",
        ("shellfish", "peanuts", "sesame", "kiwi", "walnuts", "mustard"),
    ),
    FactTemplate(
        "dog",
        "My dog is called {value}.",
        "What's the name of my dog?",
        "What is my dog called?",
        ("Biscuit", "Juniper", "Moose", "Clementine", "Waffles", "Pickle"),
    ),
    FactTemplate(
        "job",
        "I work as a {value}.",
        "What do I do for a living?",
        "What do I work as?",
        ("marine biologist", "tax accountant", "paramedic", "sommelier", "welder", "midwife"),
    ),
    FactTemplate(
        "city",
        "I live in {value}.",
        "Which city am I based in?",
        "Where do I live?",
        ("Halifax", "Porto", "Tartu", "Hobart", "Ljubljana", "Dunedin"),
    ),
    FactTemplate(
        "band",
        "My favourite band is {value}.",
        "What music do I like best?",
        "What is my favourite band?",
        ("Radiohead", "Khruangbin", "Fleetwood Mac", "Massive Attack", "Portishead", "ABBA"),
    ),
    FactTemplate(
        "birthday",
        "My birthday is on {value}.",
        "When do I celebrate my birthday?",
        "When is my birthday?",
        ("March 14", "July 2", "October 30", "January 9", "May 23", "August 17"),
    ),
    FactTemplate(
        "diet",
        "I don't eat {value}.",
        "Is there anything I don't eat?",
        "What don't I eat?",
        ("mushrooms", "pork", "red meat", "dairy", "gluten", "coriander"),
    ),
    FactTemplate(
        "daughter",
        "Remember that my daughter's name is {value}.",
        "What is my daughter called?",
        "What is my daughter's name?",
        ("Ines", "Matilda", "Noor", "Freya", "Aiko", "Leonie"),
    ),
    FactTemplate(
        "food",
        "My favourite food is {value}.",
        "What's my favourite dish?",
        "What is my favourite food?",
        ("pad thai", "pierogi", "shakshuka", "ramen", "moussaka", "bibimbap"),
    ),
    FactTemplate(
        "trip",
        "I'm flying to {value} next Tuesday.",
        "Where am I travelling to soon?",
        "Where am I flying to next Tuesday?",
        ("Lisbon", "Osaka", "Reykjavik", "Nairobi", "Montreal", "Seville"),
    ),
    FactTemplate(
        "shoes",
        "My shoe size is {value}.",
        "What size shoes do I wear?",
        "What is my shoe size?",
        ("42", "38", "44", "39", "46", "41"),
    ),
    FactTemplate(
        "colour",
        "My favourite colour is {value}.",
        "Which colour do I like most?",
        "What is my favourite colour?",
        ("teal", "mustard yellow", "burgundy", "lilac", "forest green", "coral"),
    ),
    # Phrasings the rules before issue 13 did not read (they stored nothing for them).
    FactTemplate(
        "car",
        "I drive a {value}.",
        "What car do I have?",
        "What do I drive?",
        ("blue Subaru Outback", "red Mazda MX-5", "grey Toyota Prius", "green Volvo V70"),
    ),
    FactTemplate(
        "instrument",
        "I play the {value}.",
        "Which instrument do I play?",
        "What do I play?",
        ("cello", "banjo", "trumpet", "bassoon", "harp", "ukulele"),
    ),
    FactTemplate(
        "language",
        "I speak {value} fluently.",
        "Which languages do I speak?",
        "What do I speak fluently?",
        ("Finnish", "Portuguese", "Korean", "Swahili", "Greek", "Polish"),
    ),
    FactTemplate(
        "studies",
        "I studied {value} at university.",
        "What did I study?",
        "What did I study at university?",
        ("philosophy", "mechanical engineering", "art history", "geology", "linguistics"),
    ),
)

FACT_WRAPPERS = (
    "{fact}",
    "Oh, by the way, {fact}",
    "{fact} Anyway, what do you think about the weather lately?",
    "Quick one: {fact} Can you recommend a podcast?",
    "Honestly, {fact}",
    "{fact} Sorry, random thought.",
)

# User small talk. The ones in first person about the user are stored by the extractor too.
CHITCHAT = (
    "How are you today?",
    "Can you suggest a podcast about history?",
    "What's a good way to keep basil alive on a windowsill?",
    "The weather has been strange lately.",
    "Haha, that's funny.",
    "Thanks, that was helpful!",
    "Tell me something interesting about octopuses.",
    "What should I cook tonight?",
    "Do you think it will rain this weekend?",
    "Any tips for sleeping better?",
    "That's a fair point.",
    "What's the difference between a latte and a flat white?",
    "Can you recommend a board game for four people?",
    "Why is the sky blue?",
    "Give me a fun fact about space.",
    "Ok, makes sense.",
    "How long should I boil an egg for a runny yolk?",
    "What's a good stretch after sitting all day?",
    "Is it worth learning to touch type?",
    "Recommend me a short novel.",
    "What's your favourite season?",
    "Hmm, I'm not sure about that.",
    "Can you explain what a black hole is, simply?",
    "What are some easy houseplants?",
    "Interesting, go on.",
    "Tell me a joke about penguins.",
    "How do I remove a coffee stain?",
    "What's a good name for a sourdough starter?",
    "What's a good podcast for a long drive?",
    "Do you know any good riddles?",
    "How do I fold a fitted sheet?",
    "What's the best way to learn a few words of a new language?",
    "Any ideas for a rainy afternoon?",
    "Wow, I didn't know that.",
)

# First person about the user: the extractor stores most of these as memories, which compete with
# the planted facts at recall (several are near their topics: food, music, travel, pets, colours).
ABOUT_ME = (
    "I went for a long walk this morning.",
    "I love rainy Sundays.",
    "I watched a documentary about bees yesterday.",
    "I bought new running shoes last week.",
    "I hate waking up early.",
    "I enjoy long train journeys.",
    "I prefer tea in the afternoon.",
    "I had ramen for lunch today.",
    "I went to a concert last Friday.",
    "I visited my parents last weekend.",
    "I started a pottery class this month.",
    "I love the smell of fresh bread.",
    "I'm a morning person.",
    "I prefer window seats on trains.",
    "I enjoy cooking on Sundays.",
    "I bought a new bike last month.",
    "I like jazz in the evenings.",
    "I hate loud restaurants.",
    "I prefer cats to dogs.",
    "I watched a documentary about Iceland last night.",
    "I went swimming this morning.",
    "I love spicy food.",
    "I'm learning to bake sourdough.",
    "I enjoy crosswords on the train.",
    "I like my coffee strong.",
    "I got a haircut yesterday.",
    "I prefer e-books to paper books.",
    "I love autumn colours.",
    "I hate the cold.",
    "I ran five kilometres on Sunday.",
    "I enjoy birdwatching.",
    "I had a dentist appointment on Monday.",
    "I'm a big fan of old westerns.",
    "I lost my umbrella on the bus yesterday.",
    "I love the sea in winter.",
    "I like podcasts about science.",
    "I have two cats.",
    "I moved flats last year.",
)

ASSISTANT = (
    "That's a great question.",
    "Here's what I'd suggest.",
    "Many people find that a little routine goes a long way.",
    "It depends a bit on your taste, but there are some safe choices.",
    "A simple approach usually works best at first.",
    "You could start small and see how it feels after a week.",
    "There's a lot of good material on that topic, from short articles to long-form podcasts.",
    "If you want, I can go into more detail on any of these.",
    "The short answer is yes, with a few caveats.",
    "Scientists have studied this for decades, and the picture keeps getting more interesting.",
    "Light, water and patience are the three things that matter most here.",
    "I'd avoid overthinking it; most options are perfectly fine.",
    "Some people swear by it, others find it makes no difference at all.",
    "Sunlight scatters off air molecules, and shorter wavelengths scatter the most.",
    "A good rule of thumb is to give it a few minutes and check again.",
    "That sounds lovely, by the way.",
    "Let me know how it goes!",
    "It's a classic for a reason: easy to learn and hard to put down.",
    "Keep an eye on the forecast, since it has been changing quickly.",
    "Happy to help with anything else you need.",
)


@dataclass(frozen=True)
class PlantedFact:
    template: FactTemplate
    value: str
    turn: int  # index of the user turn that states it

    @property
    def question(self) -> str:
        return self.template.question


@dataclass(frozen=True)
class Conversation:
    user: str
    turns: tuple[tuple[str, str], ...]  # (user text, assistant text)
    facts: tuple[PlantedFact, ...]


def assistant_reply(rng: random.Random) -> str:
    return " ".join(rng.sample(ASSISTANT, rng.randint(3, 6)))


def conversation(rng: random.Random, user: str, turns: int, facts: int) -> Conversation:
    templates = rng.sample(FACTS, facts)
    fact_turns = sorted(rng.sample(range(turns), facts))
    planted: dict[int, PlantedFact] = {}
    for template, turn in zip(templates, fact_turns, strict=True):
        planted[turn] = PlantedFact(template, rng.choice(template.values), turn)
    # Small talk without repeats within a conversation: as many about-me lines as other lines.
    about_me = rng.sample(ABOUT_ME, min(len(ABOUT_ME), turns // 2))
    small_talk = rng.sample(CHITCHAT, min(len(CHITCHAT), turns - len(about_me)))
    filler = about_me + small_talk
    rng.shuffle(filler)
    lines = []
    for index in range(turns):
        fact = planted.get(index)
        if fact is None:
            text = filler.pop()
        else:
            statement = fact.template.statement.format(value=fact.value)
            wrapper = rng.choice(FACT_WRAPPERS)
            if wrapper.startswith(("Oh", "Honestly")):  # mid-sentence: lower-case "My"
                statement = (
                    statement[0].lower() + statement[1:] if statement[:2] == "My" else statement
                )
            text = wrapper.format(fact=statement)
        lines.append((text, assistant_reply(rng)))
    return Conversation(user, tuple(lines), tuple(planted[t] for t in sorted(planted)))


def conversations(count: int, turns: int, facts: int, seed: int) -> list[Conversation]:
    rng = random.Random(seed)
    return [conversation(rng, f"conv{index:03d}", turns, facts) for index in range(count)]
