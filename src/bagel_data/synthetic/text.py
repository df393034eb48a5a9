"""Word lists and sentence builders for the synthetic datasets.

Everything takes a ``numpy.random.Generator`` so the text is reproducible from a
seed. The sentences are composed from small vocabularies so captions, edit
instructions and conversations read like real data (mostly English, a few
Chinese strings) without shipping any real corpus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SUBJECTS = (
    "bicycle",
    "dog",
    "cat",
    "teapot",
    "sailboat",
    "lighthouse",
    "vintage car",
    "horse",
    "backpack",
    "street lamp",
    "wooden bench",
    "umbrella",
    "guitar",
    "tram",
    "fox",
)
# Colour words with the RGB used when an edit paints that colour, so instructions stay truthful.
COLOR_RGB = {
    "red": (0.85, 0.12, 0.1),
    "blue": (0.1, 0.3, 0.85),
    "green": (0.15, 0.65, 0.2),
    "yellow": (0.95, 0.85, 0.15),
    "white": (0.95, 0.95, 0.95),
    "black": (0.05, 0.05, 0.05),
    "orange": (0.95, 0.55, 0.1),
    "purple": (0.55, 0.2, 0.7),
    "silver": (0.75, 0.75, 0.8),
    "brown": (0.45, 0.28, 0.12),
}
COLORS = tuple(COLOR_RGB)
POSES = (
    "leaning against a brick wall",
    "standing on a wooden pier",
    "resting on the grass",
    "standing beside a quiet road",
    "sitting on a kitchen table",
    "half hidden behind a fence",
    "reflected in a shallow puddle",
    "placed in front of a large window",
)
PLACES = (
    "in a small seaside town",
    "in a busy city square",
    "on a misty mountain trail",
    "in a sunlit garden",
    "near an old railway station",
    "on a snowy street",
    "in a cozy living room",
)
TIMES = (
    "at sunset",
    "in the early morning",
    "on a rainy afternoon",
    "at night under street lights",
    "on a bright summer day",
    "during the golden hour",
)
STYLES = (
    "A photo of",
    "A close-up photograph of",
    "A wide-angle shot of",
    "A film photograph of",
    "An overhead view of",
    "A blurry snapshot of",
)
DETAILS = (
    "The background is softly out of focus.",
    "Warm light falls across the scene.",
    "There are a few people walking in the distance.",
    "The colors are muted and slightly faded.",
    "Long shadows stretch across the ground.",
    "Raindrops glisten on every surface.",
)

ZH_SUBJECTS = {
    "bicycle": "自行车",
    "dog": "小狗",
    "cat": "猫",
    "teapot": "茶壶",
    "sailboat": "帆船",
    "lighthouse": "灯塔",
    "vintage car": "老式汽车",
    "horse": "马",
    "backpack": "背包",
    "street lamp": "路灯",
    "wooden bench": "木长椅",
    "umbrella": "雨伞",
    "fox": "狐狸",
    "guitar": "吉他",
    "tram": "电车",
}
ZH_COLORS = {
    "red": "红色",
    "blue": "蓝色",
    "green": "绿色",
    "yellow": "黄色",
    "white": "白色",
    "black": "黑色",
    "orange": "橙色",
    "purple": "紫色",
    "silver": "银色",
    "brown": "棕色",
}

TEXT_ONLY = (
    ("What is the capital of France?", "The capital of France is Paris."),
    (
        "Write a haiku about autumn rain.",
        "Cold autumn rain falls,\nleaves drift on the silver pond,\nthe lamps glow softly.",
    ),
    (
        "Explain photosynthesis in one sentence.",
        "Photosynthesis is the process by which plants use sunlight, water and carbon dioxide "
        "to make sugar and oxygen.",
    ),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("用一句话介绍长城。", "长城是中国古代修建的军事防御工程，绵延数千公里。"),
    ("Translate 'good morning' into Spanish.", "'Good morning' in Spanish is 'buenos días'."),
)


@dataclass(frozen=True)
class Scene:
    """The content of one synthetic picture, shared by its captions and dialogue."""

    subject: str
    color: str
    pose: str
    place: str
    time: str


def pick(rng: np.random.Generator, items: Sequence[str]) -> str:
    return items[int(rng.integers(len(items)))]


def random_scene(rng: np.random.Generator) -> Scene:
    return Scene(pick(rng, SUBJECTS), pick(rng, COLORS), pick(rng, POSES), pick(rng, PLACES), pick(rng, TIMES))


def caption(rng: np.random.Generator, scene: Scene, long: bool = False) -> str:
    """One caption of ``scene``; ~10% of short ones are Chinese, long ones add detail sentences."""
    if not long and rng.random() < 0.1:
        return f"一个{ZH_COLORS[scene.color]}的{ZH_SUBJECTS[scene.subject]}，画面安静而温暖。"
    text = f"{pick(rng, STYLES)} a {scene.color} {scene.subject} {scene.pose} {scene.time}."
    if long:
        text += f" The scene is set {scene.place}. {pick(rng, DETAILS)}"
    return text


def captions(rng: np.random.Generator, scene: Scene, n: int) -> dict[str, str]:
    """A captions object with ``n`` entries; alternating short/long like real recaption sets."""
    return {f"caption_{k + 1}": caption(rng, scene, long=k % 2 == 1) for k in range(n)}


def edit_instructions(rng: np.random.Generator, kind: str, scene: Scene, new_color: str) -> list[str]:
    """Two or three equivalent phrasings of one edit step."""
    s, c, zh_c = scene.subject, new_color, ZH_COLORS[new_color]
    if kind == "add":
        options = [
            f"Add a {c} ball next to the {s}.",
            f"Place a small {c} ball beside the {s}.",
            f"Put a {c} ball in the picture near the {s}.",
            f"在{ZH_SUBJECTS[s]}旁边加一个{zh_c}的球。",
        ]
    else:
        options = [
            f"Make the whole scene look more {c}.",
            f"Give the photo a {c} tint.",
            f"Change the lighting so everything looks {c}.",
            f"把整张图片调成{zh_c.removesuffix('色')}色调。",
        ]
    order = rng.permutation(len(options))
    return [options[i] for i in order[: int(rng.integers(2, 4))]]


def _image_qas(rng: np.random.Generator, scene: Scene) -> list[tuple[str, str]]:
    """Question/answer pairs about one picture in random order, without repeats."""
    s, c = scene.subject, scene.color
    qa = [
        (f"What color is the {s}?", f"The {s} is {c}."),
        (f"Where is the {s}?", f"The {s} is {scene.pose}, {scene.place}."),
        ("Describe the image in detail.", f"{caption(rng, scene, long=True)} {pick(rng, DETAILS)}"),
        ("When do you think this photo was taken?", f"Judging by the light, it was probably taken {scene.time}."),
    ]
    if rng.random() < 0.1:
        qa.append(("请描述这张图片。", f"图片中有一个{ZH_COLORS[c]}的{ZH_SUBJECTS[s]}。"))
    return [qa[i] for i in rng.permutation(len(qa))]


def _place_image(question: str, placement: str) -> str:
    """Put one ``<image>`` before, after or inside the question sentence."""
    if placement == "prefix":
        return f"<image>\n{question}"
    if placement == "suffix":
        return f"{question}\n<image>"
    return f"Here is a photo <image> that I took yesterday. {question}"


def conversation(
    rng: np.random.Generator, n_images: int, video: bool, n_turns: int, placement: str = "prefix"
) -> list[dict[str, str]]:
    """A dialogue of ``n_turns`` rounds with exactly ``n_images`` ``<image>`` tokens (and
    one ``<video>`` when ``video``) in human turns. With two images and several rounds
    the second image arrives in the second round, as in real multi-image chats."""
    scene = random_scene(rng)
    pool = _image_qas(rng, scene) if n_images or video else [TEXT_ONLY[i] for i in rng.permutation(len(TEXT_ONLY))]
    if video:
        turns = [
            (
                "<video>\nDescribe what happens in this video.",
                f"The camera slowly pans {scene.place}, passing a {scene.color} {scene.subject} {scene.time}.",
            )
        ]
    elif n_images == 2 and n_turns == 1:
        turns = [
            (
                "<image><image>\nWhat is different between these two pictures?",
                f"The first picture shows a {scene.color} {scene.subject}, while the second one is "
                f"taken {pick(rng, PLACES)} with different lighting.",
            )
        ]
    elif n_images:
        q, a = pool.pop()
        turns = [(_place_image(q, placement if n_images == 1 else "prefix"), a)]
        if n_images == 2:
            turns.append(
                ("And what about this one?\n<image>", f"This one shows the same {scene.subject} {pick(rng, TIMES)}.")
            )
    else:
        turns = [pool.pop()]
    while len(turns) < n_turns:
        turns.append(pool.pop())
    return [{"from": who, "value": v} for q, a in turns for who, v in (("human", q), ("gpt", a))]
