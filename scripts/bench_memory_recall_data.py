"""Long synthetic conversations between two named friends for the memory recall benchmark: every
turn is stored as a memory, as it was said ("Caroline: I went to a pottery workshop yesterday, it
was so calming."), and each question names the turns that hold its answer (its evidence).

Made here from fixed lists with a seeded ``random.Random``: no data set, no model, no download. The
shape is that of long real conversations (LoCoMo's): many dated sessions a week or two apart, each
speaker's life events mentioned once, in passing, with a relative time ("yesterday", "last
weekend"), the friend echoing the event's words back with the speaker's name ("A pottery workshop?
That sounds so relaxing, Caroline!"), the detail told in the next turn, often in other words; both
friends may live the same kind of event, so a question is answered by the speaker it names; the
small talk is assembled from parts, never repeated verbatim. The questions are LoCoMo's kinds:

- single-hop: one fact, asked in other words than the turn that tells it;
- temporal: "When did Caroline ...?", answered by the session's date (each memory's
  ``observed_at``) and the turn's relative time;
- multi-hop: what two or more turns of different sessions tell together;
- open-domain: whether the speaker would likely do or like something, from what one turn tells.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

KINDS = ("single-hop", "multi-hop", "temporal", "open-domain")


@dataclass(frozen=True)
class Event:
    key: str
    topic: str  # events of one topic are asked about together (multi-hop)
    mentions: tuple[str, ...]  # the speaker's first mention; "{when}": a relative time
    echoes: tuple[str, ...]  # the friend's reply, in the event's words; "{name}": the speaker
    details: tuple[str, ...]  # the speaker's next turn; "{v}": the value
    fact: str  # single-hop, answered by the detail; "{name}"
    when: str  # temporal, answered by the mention
    likely: str  # open-domain, answered by the mention
    values: tuple[str, ...]


EVENTS: tuple[Event, ...] = (
    Event(
        "pottery",
        "art",
        (
            "I went to a pottery workshop {when}, it was so calming to work with clay.",
            "Guess what, I finally tried pottery {when}! My hands were covered in clay.",
        ),
        (
            "A pottery workshop? That sounds so relaxing, {name}! What did you make?",
            "Ooh, clay! I've always wanted to try that, {name}. Did you make anything?",
        ),
        ("I made {v}, it's a bit wonky but I love it.", "Just {v}, nothing fancy, but I'm proud."),
        "What did {name} make at the pottery workshop?",
        "When did {name} go to the pottery workshop?",
        "Would {name} enjoy a ceramics course?",
        ("a blue bowl", "a lopsided mug", "a little vase", "a plate for my mom", "a flower pot"),
    ),
    Event(
        "painting",
        "art",
        (
            "I started painting again {when}, I set up an easel by the window.",
            "I spent the whole afternoon painting {when}, I forgot how much I love it.",
        ),
        (
            "Painting by the window sounds lovely, {name}! What was it of?",
            "That's awesome {name}, what did you paint?",
        ),
        ("It's {v}, I used a lot of watercolours.", "I did {v}, the colours came out really soft."),
        "What did {name} paint?",
        "When did {name} paint the picture?",
        "Would {name} like a gift card for an art supply store?",
        (
            "a sunset over the lake",
            "my cat asleep on the couch",
            "a field of sunflowers",
            "a city skyline at night",
        ),
    ),
    Event(
        "photography",
        "art",
        (
            "I took my camera out to the old harbour {when} and shot a whole roll.",
            "I joined a photography walk {when}, there were like twenty of us with cameras.",
        ),
        (
            "A photo walk, how fun {name}! Get any good shots?",
            "Your camera again! What were you taking pictures of, {name}?",
        ),
        ("Mostly {v}, the light was perfect.", "My favourite one is of {v}."),
        "What did {name} take pictures of?",
        "When did {name} go out taking photos?",
        "Would {name} be interested in a photo exhibition?",
        ("fishing boats", "seagulls on the pier", "old brick warehouses", "people at the market"),
    ),
    Event(
        "camping",
        "outdoors",
        (
            "We went camping {when}, slept in a tent for the first time in years.",
            "Just got back from a camping trip, we left {when} and it rained the whole night.",
        ),
        (
            "Camping! I'm jealous, {name}. Where did you go?",
            "A tent in the rain, oh no {name}! Where was the campsite?",
        ),
        ("We stayed at {v}, the views were unreal.", "It was at {v}, totally worth the mud."),
        "Where did {name} go camping?",
        "When did {name} go camping?",
        "Does {name} like sleeping outdoors?",
        ("Pine Lake", "the state park by the river", "a spot near the coast", "Bear Creek"),
    ),
    Event(
        "hiking",
        "outdoors",
        (
            "I hiked up the big trail {when}, my legs are still sore.",
            "I did a long hike {when}, almost fifteen miles!",
        ),
        (
            "Fifteen miles? You're a machine, {name}! What was the view like?",
            "Sore legs means it was worth it, {name}. What did you see up there?",
        ),
        ("At the top there was {v}.", "The best part was {v}."),
        "What did {name} see at the top of the trail?",
        "When did {name} go on the long hike?",
        "Would {name} enjoy a mountain trip?",
        ("a waterfall", "a huge view of the valley", "a family of deer", "snow on the peaks"),
    ),
    Event(
        "kayaking",
        "outdoors",
        (
            "I rented a kayak {when} and paddled around the bay.",
            "I went kayaking for the first time {when}, I only tipped over once!",
        ),
        (
            "Kayaking sounds amazing, {name}! Was it hard?",
            "Only once, nice {name}! Who went with you on the water?",
        ),
        (
            "I went with {v}, we raced back to the dock.",
            "{v} came along and laughed at me the whole time.",
        ),
        "Who was with {name} on the water?",
        "When did {name} go kayaking?",
        "Is {name} into water sports?",
        ("my brother", "my neighbour Sam", "a friend from work", "my cousin"),
    ),
    Event(
        "dog",
        "pets",
        (
            "We adopted a puppy {when}, the house is chaos now.",
            "Big news, we brought a rescue dog home {when}!",
        ),
        (
            "A puppy! Send pictures, {name}! What's the name?",
            "A rescue dog, that's so sweet of you {name}. What did you call him?",
        ),
        ("His name is {v}, he chews everything.", "We named him {v}, he already rules the couch."),
        "What is the name of {name}'s dog?",
        "When did {name} adopt the dog?",
        "Would {name} want to visit a dog park?",
        ("Biscuit", "Moose", "Pickle", "Ziggy", "Nacho", "Waffles"),
    ),
    Event(
        "cat",
        "pets",
        (
            "A kitten showed up at our door {when} and we kept her.",
            "We got a cat from the shelter {when}, she's so shy.",
        ),
        (
            "Aww a kitten, {name}! What's she called?",
            "Shy cats are the best once they warm up, {name}. Does she have a name?",
        ),
        ("We call her {v}.", "She's {v}, and she hides under the bed all day."),
        "What did {name} name the cat?",
        "When did {name} get the cat?",
        "Is {name} an animal lover?",
        ("Olive", "Luna", "Mochi", "Pepper", "Juniper"),
    ),
    Event(
        "volunteer",
        "community",
        (
            "I started volunteering {when}, I help out on Saturday mornings.",
            "I signed up to volunteer {when}, my first shift was exhausting but good.",
        ),
        (
            "Volunteering, that's so you, {name}! Where is it?",
            "First shift done, go {name}! Where are you helping out?",
        ),
        ("It's at {v}.", "I'm helping at {v}, the people there are so kind."),
        "Where does {name} volunteer?",
        "When did {name} start volunteering?",
        "Would {name} care about charity work?",
        ("the food bank", "an animal shelter", "the youth centre", "a community garden"),
    ),
    Event(
        "support_group",
        "community",
        (
            "I went to a support group {when}, it was so powerful.",
            "I finally went to that support group meeting {when}, I was nervous at first.",
        ),
        (
            "A support group, I'm proud of you {name}! What was it like?",
            "That takes courage, {name}. What happened at the meeting?",
        ),
        (
            "The stories about {v} really moved me.",
            "People talked about {v} and I didn't feel alone.",
        ),
        "What did people share at the meeting {name} attended?",
        "When did {name} attend the support group?",
        "Is {name} open about personal struggles?",
        ("coming out", "losing a parent", "moving to a new country", "anxiety at work"),
    ),
    Event(
        "parade",
        "community",
        (
            "We marched in the parade downtown {when}, the crowd was huge.",
            "I went to the city parade {when} and we carried a big banner.",
        ),
        (
            "The parade! I saw photos online, {name}. What did your banner say?",
            "Marching downtown sounds so fun, {name}! What was the banner about?",
        ),
        ("It said {v}, people kept cheering.", "Our banner read {v}."),
        "What message did {name} carry through the streets?",
        "When did {name} march in the parade?",
        "Would {name} go to a community festival?",
        ("love is love", "save our library", "more bike lanes", "clean the river"),
    ),
    Event(
        "interview",
        "career",
        (
            "I had a job interview {when}, I think it went well?",
            "Had my big interview {when}, I was shaking the whole time.",
        ),
        (
            "Fingers crossed, {name}! Which company?",
            "You'll be fine, {name}. Where was the interview?",
        ),
        ("It's at {v}, a design role.", "It was with {v}, they'll call back next week."),
        "Where did {name} have a job interview?",
        "When did {name} have the job interview?",
        "Is {name} looking for a new job?",
        (
            "a startup called Brightleaf",
            "the city museum",
            "a marketing agency downtown",
            "the hospital",
        ),
    ),
    Event(
        "course",
        "career",
        (
            "I enrolled in an evening course {when}, back to school at my age!",
            "I started a night class {when}, homework again, can you believe it.",
        ),
        (
            "Back to school, {name}! What are you studying?",
            "A night class, so brave {name}. What's the subject?",
        ),
        (
            "It's {v}, I want to switch careers eventually.",
            "I'm learning {v}, it's harder than I thought.",
        ),
        "What is {name} studying in the evening course?",
        "When did {name} enroll in the course?",
        "Would {name} consider going back to university?",
        ("counselling", "web development", "accounting", "graphic design", "nursing basics"),
    ),
    Event(
        "promotion",
        "career",
        (
            "My boss called me in {when} and I got promoted!",
            "I got the promotion, they told me {when}!",
        ),
        (
            "Congrats {name}, you earned it! What's the new role?",
            "That's huge, {name}! What's the new title?",
        ),
        (
            "I'm {v} now, more meetings but more money.",
            "The title is {v}, I still can't believe it.",
        ),
        "What is {name}'s new role at work?",
        "When did {name} get promoted?",
        "Is {name} ambitious about work?",
        ("team lead", "senior editor", "head of sales", "shift manager"),
    ),
    Event(
        "recital",
        "family",
        (
            "My daughter had her school recital {when}, I cried a little.",
            "We went to the kids' school concert {when}, they were so cute.",
        ),
        (
            "Aw, a recital! What did she play, {name}?",
            "The school concert, that's adorable {name}. What instrument?",
        ),
        (
            "She played the {v}, not a single wrong note.",
            "The {v}! She's been practising for months.",
        ),
        "What instrument did {name}'s child play?",
        "When was the school recital {name} went to?",
        "Does {name} support the kids' hobbies?",
        ("violin", "clarinet", "piano", "flute", "cello"),
    ),
    Event(
        "grandma",
        "family",
        (
            "I visited my grandma {when}, she's turning ninety soon.",
            "Spent the day with my grandmother {when}, she told the best old stories.",
        ),
        (
            "Grandma stories are the best, {name}! Where does she live?",
            "Ninety, wow! Is she far from you, {name}?",
        ),
        (
            "She lives in {v}, a long drive but worth it.",
            "She's out in {v}, in the same house for sixty years.",
        ),
        "Where does {name}'s grandma live?",
        "When did {name} visit the grandmother?",
        "Is {name} close to the older relatives?",
        ("Maple Falls", "a small town by the sea", "Springfield", "the countryside near Dover"),
    ),
    Event(
        "wedding",
        "family",
        (
            "My brother got married {when}, the whole family was there.",
            "We had my sister's wedding {when}, I gave a speech!",
        ),
        (
            "A wedding, how lovely {name}! Where was it held?",
            "You gave a speech, {name}? Where was the ceremony?",
        ),
        ("It was at {v}, absolutely beautiful.", "They did it at {v}, we danced till midnight."),
        "Where did the sibling's ceremony take place for {name}'s family?",
        "When did {name}'s sibling get married?",
        "Does {name} enjoy big family celebrations?",
        ("a vineyard", "an old barn", "the beach", "a castle hotel"),
    ),
    Event(
        "race",
        "fitness",
        (
            "I ran a charity 5k {when}, my first race ever.",
            "Did a charity run {when}, I finished without walking!",
        ),
        (
            "Your first race, amazing {name}! What was it for?",
            "No walking, nice one {name}. Which charity?",
        ),
        ("It raised money for {v}.", "It was for {v}, we raised over two thousand."),
        "What was {name}'s charity run for?",
        "When did {name} run the charity race?",
        "Would {name} sign up for another running event?",
        (
            "children's hospitals",
            "cancer research",
            "the homeless shelter",
            "mental health support",
        ),
    ),
    Event(
        "yoga",
        "fitness",
        (
            "I tried a yoga class {when}, I am way less flexible than I thought.",
            "I went to my first yoga session {when}, so peaceful.",
        ),
        (
            "Yoga, nice {name}! Which kind did you try?",
            "Peaceful sounds good, {name}. What style was it?",
        ),
        ("It was {v}, I loved the breathing part.", "They call it {v}, lots of slow stretching."),
        "What kind of yoga did {name} try?",
        "When did {name} try yoga?",
        "Is {name} interested in mindfulness?",
        ("hot yoga", "yin yoga", "vinyasa", "chair yoga"),
    ),
    Event(
        "injury",
        "fitness",
        (
            "I slipped on the stairs {when}, now I'm hobbling around.",
            "I hurt myself playing basketball {when}, nothing broken luckily.",
        ),
        (
            "Oh no, {name}! What did you hurt?",
            "Ouch, feel better {name}! Is it bad?",
        ),
        ("It's my {v}, the doctor says two weeks of rest.", "I sprained my {v}, it's all swollen."),
        "Which part of the body did {name} injure?",
        "When did {name} get hurt?",
        "Would {name} skip the gym for a while?",
        ("left ankle", "right wrist", "knee", "shoulder"),
    ),
    Event(
        "concert",
        "music",
        (
            "I went to a concert {when}, my ears are still ringing.",
            "We saw a live show {when}, the crowd was singing every word.",
        ),
        (
            "A concert, so jealous {name}! Who played?",
            "Singing every word, love that {name}. Which band was it?",
        ),
        ("It was {v}, they played for three hours.", "We saw {v}, best night of the year."),
        "Which band did {name} see at the concert?",
        "When did {name} go to the concert?",
        "Would {name} buy tickets to a music festival?",
        ("The Lumineers", "a local jazz band", "Coldplay", "an orchestra playing film music"),
    ),
    Event(
        "guitar",
        "music",
        (
            "I picked up an old guitar {when} and started teaching myself.",
            "I bought a guitar {when}, my fingertips are killing me.",
        ),
        (
            "A guitar, {name}, rock star! What are you learning to play?",
            "Fingertips hurt at first, {name}, keep going! What songs?",
        ),
        ("I'm trying to play {v}.", "So far just {v}, badly."),
        "What is {name} trying to play on the guitar?",
        "When did {name} start learning guitar?",
        "Would {name} enjoy an open mic night?",
        ("Wonderwall", "a lullaby for my son", "some Beatles songs", "Hallelujah"),
    ),
    Event(
        "road_trip",
        "travel",
        (
            "We drove down the coast {when}, a proper road trip.",
            "Back from our road trip, we set off {when} and did six hundred miles.",
        ),
        (
            "A road trip sounds dreamy, {name}! Where did you end up?",
            "Six hundred miles, {name}! What was the best stop?",
        ),
        ("We ended up in {v}.", "The best stop was {v}, we stayed an extra night."),
        "Where did {name}'s road trip end up?",
        "When did {name} go on the road trip?",
        "Would {name} enjoy travelling by car again?",
        ("Santa Barbara", "a tiny town with a lighthouse", "Monterey", "Big Sur"),
    ),
    Event(
        "museum",
        "travel",
        (
            "I went to the museum {when}, there was a new exhibit.",
            "We spent {when} at the museum, the kids loved it.",
        ),
        (
            "Which exhibit was it, {name}?",
            "The museum, fun! What did you see, {name}?",
        ),
        ("It was all about {v}.", "The exhibit on {v} was incredible."),
        "What was the exhibit {name} saw about?",
        "When did {name} visit the museum?",
        "Is {name} curious about history?",
        ("ancient Egypt", "dinosaurs", "space travel", "impressionist painters"),
    ),
)

TOPICS: dict[str, str] = {
    "art": "What kinds of art has {name} done?",
    "outdoors": "What outdoor activities has {name} done?",
    "pets": "What pets does {name} have?",
    "community": "How has {name} been involved in the community?",
    "career": "What has {name} done for their career?",
    "family": "What family events has {name} been to?",
    "fitness": "What has happened to {name} around sport and exercise?",
    "music": "What has {name} done with music?",
    "travel": "What trips and outings has {name} taken?",
}

# What the friend's own stories and the speaker's later remarks call an event (they share its
# words, not its time nor its detail).
NOUNS: dict[str, str] = {
    "pottery": "pottery",
    "painting": "painting",
    "photography": "photography",
    "camping": "camping",
    "hiking": "hiking",
    "kayaking": "kayaking",
    "dog": "dogs",
    "cat": "cats",
    "volunteer": "volunteering",
    "support_group": "support groups",
    "parade": "parades",
    "interview": "job interviews",
    "course": "evening classes",
    "promotion": "work",
    "recital": "school concerts",
    "grandma": "grandparents",
    "wedding": "weddings",
    "race": "running",
    "yoga": "yoga",
    "injury": "injuries",
    "concert": "concerts",
    "guitar": "guitar",
    "road_trip": "road trips",
    "museum": "museums",
}
ASIDES = (
    "Oh I tried {noun} once with my {relative}, it was a disaster haha.",
    "My {relative} is really into {noun} too, you two should talk.",
    "I've been wanting to get into {noun} for ages.",
    "Funny, I was just reading about {noun} {time}.",
    "Honestly {noun} was never my thing, but I love hearing about it.",
)
RECURS = (
    "I keep thinking about {noun} lately, it really stuck with me.",
    "Still can't stop talking about {noun}, my {relative} is sick of it haha.",
    "I told my {relative} all about {noun} {time}.",
    "You know me and {noun}, I'm hooked.",
)

WHEN: tuple[str, ...] = (
    "yesterday",
    "last weekend",
    "last Friday",
    "this morning",
    "a couple of days ago",
    "last week",
    "on Sunday",
)

NAMES: tuple[tuple[str, str], ...] = (
    ("Caroline", "Melanie"),
    ("Jon", "Gina"),
    ("John", "Maria"),
    ("Joanna", "Nate"),
    ("Tim", "John"),
    ("Audrey", "Andrew"),
    ("James", "John"),
    ("Deborah", "Jolene"),
    ("Evan", "Sam"),
    ("Calvin", "Dave"),
    ("Priya", "Tomasz"),
    ("Amara", "Lucas"),
)

# Small talk is put together from parts, so no line is said twice verbatim.
OPENERS = ("", "Honestly, ", "So ", "Oh, and ", "Ugh, ", "Anyway, ", "Funny thing, ", "Yeah, ")
CLAUSES = (
    "work has been crazy this week",
    "I've been trying to wake up earlier",
    "the weather finally turned warm",
    "I binge-watched a {genre} show all weekend",
    "we tried that new {cuisine} place downtown",
    "my {relative} called to catch up",
    "I rearranged the living room furniture",
    "the kids both have a cold again",
    "I've been meaning to clean out my closet",
    "traffic was awful on the way home",
    "I finally fixed the leaky tap",
    "I'm thinking about getting bangs",
    "I've been cooking a lot of {cuisine} food lately",
    "my {relative} is visiting next month",
    "the neighbours are renovating and it's so loud",
    "I can't stop listening to that new album",
    "we're planning a quiet {day} at home",
    "I read half a {genre} novel on the train",
    "my phone screen cracked again",
    "I've been drinking way too much coffee",
    "our car needs new tyres",
    "I had the weirdest dream last night",
    "the garden is overgrown again",
    "I'm trying to save money this month",
    "I spent {day} doing laundry and errands",
    "my {relative} sent me a funny video",
    "I've been sleeping badly",
    "the power went out for a bit on {day}",
    "I'm obsessed with this {genre} podcast",
    "we ordered {cuisine} takeout again",
    "I need a haircut so badly",
    "my back has been stiff from sitting all day",
    "I started a puzzle with a thousand pieces",
    "I cleaned the whole kitchen top to bottom",
    "I keep forgetting to water my plants",
    "the internet has been so slow",
    "I burned the toast {time}, the smoke alarm went off",
    "I got stuck in a meeting that ran two hours over {time}",
    "the bus broke down {time} and I walked the rest",
    "I found twenty dollars in an old coat {time}",
    "my {relative} keeps sending me recipes",
    "I'm trying to cut back on sugar",
    "we watched a {genre} movie {time} and it was terrible",
    "I baked banana bread {time}",
    "the washing machine flooded the bathroom {time}",
    "I've started journaling before bed",
    "my inbox is a disaster",
    "I went grocery shopping {time} and forgot half the list",
    "we had friends over for {cuisine} dinner {time}",
    "I got a parking ticket {time}",
    "my {relative} and I finally sorted out the holiday plans",
    "I stayed in my pyjamas all of {day}",
    "I've been walking to work to get some steps in",
    "the heating is broken again",
    "I lost my keys twice {time}",
    "I've been trying to learn to cook {cuisine} dishes",
    "I took a really long nap {time}",
    "my laptop died in the middle of a call {time}",
    "I signed up for a newsletter by accident and now I get ten emails a day",
    "we've been arguing about what colour to paint the hallway",
    "I've been on a {genre} documentary kick",
    "I helped my {relative} move some furniture {time}",
)
SLOTS = {
    "genre": ("mystery", "comedy", "sci-fi", "true crime", "cooking", "history", "romance"),
    "cuisine": ("Thai", "Mexican", "Ethiopian", "Italian", "Korean", "Greek", "Indian"),
    "relative": ("mom", "dad", "aunt", "cousin", "sister", "brother", "uncle"),
    "day": ("Saturday", "Sunday", "Monday", "Wednesday", "Friday"),
    "time": ("this week", "on Monday", "the other day", "this morning", "last night"),
}
TAILS = (
    ".",
    ", it's been a lot.",
    ", but I'm hanging in there.",
    " haha.",
    ", you know how it is.",
    ", which was nice.",
    ", can't complain.",
    "!",
    ", not much else going on.",
)
REPLIES = (
    "That sounds {adj}, {name}!",
    "Haha, I know exactly what you mean, {name}.",
    "Oh no, hope it gets better soon!",
    "Same here, honestly.",
    "Love that for you, {name}.",
    "Ha, that's so {adj}.",
    "Totally get it.",
    "Wow, {name}, that's {adj}!",
    "I'm so happy for you, {name}.",
    "That's {adj}, tell me more sometime.",
)
ADJECTIVES = ("great", "fun", "rough", "wild", "sweet", "relaxing", "exciting", "tough", "cozy")
ASKS = (
    "What else have you been up to?",
    "How's everything else going?",
    "Any plans for the weekend?",
    "How's the family?",
    "How have you been sleeping?",
    "Anything fun coming up?",
)
GREETINGS = (
    "Hey {name}! Long time no talk, how have you been?",
    "Hi {name}, how's your week going?",
    "Hey {name}, got a minute to catch up?",
    "{name}! So good to hear from you.",
    "Morning {name}, what's new?",
)
GREETING_REPLIES = (
    "Hey {name}! Pretty good, busy as always.",
    "Hi {name}! Doing okay, you?",
    "Oh hey {name}, always have time for you.",
    "Hi! Not bad at all, {name}.",
)


@dataclass
class Turn:
    text: str  # "Speaker: what they said"
    said_at: datetime


@dataclass
class Question:
    text: str
    evidence: set[int]  # indexes of the conversation's turns
    kind: str  # one of KINDS


@dataclass
class Conversation:
    speakers: tuple[str, str]
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


@dataclass
class Lived:
    """An event of one speaker in this conversation: where it is told, and its turns once told."""

    speaker: int
    event: Event
    value: str
    session: int
    open_domain: bool = False  # asked about by inference too (a third of the events, as in LoCoMo)
    mention: int = -1
    detail: int = -1


def fill(rng: random.Random, template: str, **known: str) -> str:
    slots = {name: rng.choice(choices) for name, choices in SLOTS.items()}
    return template.format(**slots, adj=rng.choice(ADJECTIVES), **known)


def small_talk(rng: random.Random, said: set[str], other: str) -> str:
    """A line of small talk not said before in this conversation: a statement, a reply to the
    friend, or a question back."""
    for _ in range(50):
        roll = rng.random()
        if roll < 0.55:
            clause = fill(rng, rng.choice(CLAUSES))
            opener = rng.choice(OPENERS)
            line = opener + (clause if opener else clause[0].upper() + clause[1:])
            line += rng.choice(TAILS)
        elif roll < 0.85:
            line = fill(rng, rng.choice(REPLIES), name=other)
        else:
            line = fill(rng, rng.choice(REPLIES), name=other) + " " + rng.choice(ASKS)
        if line not in said:
            said.add(line)
            return line
    return line


def wrapped(rng: random.Random, said: set[str], core: str) -> str:
    """``core`` as a turn says it: often after a line of news, sometimes with a question back."""
    text = core
    if rng.random() < 0.4:
        text = f"{statement(rng, said)} {text}"
    if rng.random() < 0.3:
        text = f"{text} {rng.choice(ASKS)}"
    return text


def chatter(rng: random.Random, said: set[str], other: str) -> str:
    """A turn of small talk: one line, or two or three run together as people type them."""
    text = small_talk(rng, said, other)
    for _ in range(rng.choice((0, 0, 1, 1, 2))):
        text = f"{text} {statement(rng, said)}"
    return text


def statement(rng: random.Random, said: set[str]) -> str:
    for _ in range(50):
        clause = fill(rng, rng.choice(CLAUSES))
        opener = rng.choice(OPENERS)
        line = opener + (clause if opener else clause[0].upper() + clause[1:]) + rng.choice(TAILS)
        if line not in said:
            break
    said.add(line)
    return line


def lives(rng: random.Random, sessions: int) -> list[Lived]:
    """Each speaker's events: two topics with two events each (for multi-hop), four more of any
    topic; both speakers may live the same kind of event."""
    lived = []
    topics = sorted({event.topic for event in EVENTS})
    for speaker in (0, 1):
        chosen: list[Event] = []
        for topic in rng.sample(topics, k=2):
            chosen += rng.sample([e for e in EVENTS if e.topic == topic], k=2)
        rest = [e for e in EVENTS if e not in chosen]
        chosen += rng.sample(rest, k=4)
        for event in chosen:
            lived.append(
                Lived(
                    speaker,
                    event,
                    rng.choice(event.values),
                    rng.randrange(sessions),
                    open_domain=rng.random() < 1 / 3,
                )
            )
    return lived


def conversation(
    rng: random.Random, sessions: int, turns_per_session: int, speakers: tuple[str, str]
) -> Conversation:
    result = Conversation(speakers)
    events = lives(rng, sessions)
    said: set[str] = set()
    day = datetime(2023, 1, 9, 13, tzinfo=UTC) + timedelta(days=rng.randrange(200))

    def say(speaker: int, text: str, at: datetime) -> int:
        result.turns.append(Turn(f"{speakers[speaker]}: {text}", at))
        return len(result.turns) - 1

    for session in range(sessions):
        day += timedelta(days=rng.randrange(5, 20), minutes=rng.randrange(-120, 120))
        # A session is small talk with each event told as mention, echo, detail, reaction.
        here = [lived for lived in events if lived.session == session]
        blocks: list[Lived | None] = [None] * max(0, turns_per_session - 2 - 4 * len(here))
        for lived in here:
            blocks.insert(rng.randrange(len(blocks) + 1), lived)
        opener = rng.randrange(2)
        clock = iter([day + timedelta(minutes=minute) for minute in range(1, 1000)])

        name = speakers[1 - opener]
        say(opener, rng.choice(GREETINGS).format(name=name), next(clock))
        say(1 - opener, rng.choice(GREETING_REPLIES).format(name=speakers[opener]), next(clock))
        speaker = opener
        for block in blocks:
            if block is None:
                say(speaker, chatter(rng, said, speakers[1 - speaker]), next(clock))
                speaker = 1 - speaker
                continue
            me, friend = block.speaker, 1 - block.speaker
            event, noun = block.event, NOUNS[block.event.key]
            mention = rng.choice(event.mentions).format(when=rng.choice(WHEN))
            detail = rng.choice(event.details).format(v=block.value)
            detail = detail[0].upper() + detail[1:]
            if rng.random() < 0.6:  # told at once: the friend answers with a story of their own
                block.mention = block.detail = say(
                    me, wrapped(rng, said, f"{mention} {detail}"), next(clock)
                )
                say(friend, fill(rng, rng.choice(ASIDES), noun=noun), next(clock))
            else:
                block.mention = say(me, wrapped(rng, said, mention), next(clock))
                say(friend, rng.choice(event.echoes).format(name=speakers[me]), next(clock))
                block.detail = say(me, detail, next(clock))
            say(friend, chatter(rng, said, speakers[me]), next(clock))
            speaker = me
        # A speaker comes back to an earlier event, in its words, without its time or detail.
        for lived in events:
            if lived.session < session and rng.random() < 0.12:
                noun = NOUNS[lived.event.key]
                say(lived.speaker, fill(rng, rng.choice(RECURS), noun=noun), next(clock))
    result.questions = questions(events, speakers)
    return result


def questions(events: list[Lived], speakers: tuple[str, str]) -> list[Question]:
    asked = []
    for lived in events:
        name = speakers[lived.speaker]
        event = lived.event
        asked.append(Question(event.fact.format(name=name), {lived.detail}, "single-hop"))
        asked.append(Question(event.when.format(name=name), {lived.mention}, "temporal"))
        if lived.open_domain:
            asked.append(Question(event.likely.format(name=name), {lived.mention}, "open-domain"))
    for speaker in (0, 1):
        by_topic: dict[str, list[Lived]] = {}
        for lived in events:
            if lived.speaker == speaker:
                by_topic.setdefault(lived.event.topic, []).append(lived)
        for topic, lived_here in sorted(by_topic.items()):
            if len(lived_here) >= 2:
                asked.append(
                    Question(
                        TOPICS[topic].format(name=speakers[speaker]),
                        {lived.mention for lived in lived_here},
                        "multi-hop",
                    )
                )
    return asked


def conversations(
    count: int = 10, sessions: int = 16, turns_per_session: int = 22, seed: int = 7
) -> list[Conversation]:
    rng = random.Random(seed)
    pairs = list(NAMES)
    return [
        conversation(rng, sessions, turns_per_session, pairs[number % len(pairs)])
        for number in range(count)
    ]
