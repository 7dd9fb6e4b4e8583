"""A small golden set and its corpus for the evaluation tests: sixteen short documents on distinct subjects, a
question for each that names its subject in other words, and ways to make a retrieval setup measurably worse:

- ``decoys()``: one keyword-stuffed document per question (the question's words in an inventory note about
  something else). A static word-embedding model (wordllama) with BM25 falls for them more often than
  all-MiniLM-L6-v2: mrr@5 0.72 against 0.84 (measured; the gap is what the gate tests rely on).
- ``titled()``: each document titled with the next one's subject; contextual chunks embed and keyword-index
  every chunk under that misleading title (wordllama + contextual: mrr@5 0.69 against MiniLM's 1.0).
"""

from __future__ import annotations

import re

DOCS = {
    "heart": "The heart is a muscular organ that pumps blood through arteries and veins to every part of the body.",
    "lungs": "Lungs take in oxygen from the air we breathe and release carbon dioxide when we exhale.",
    "volcano": "A volcano erupts when molten rock called magma rises through the crust and bursts out as lava.",
    "glacier": "Glaciers are huge masses of ice that slowly slide down valleys, carving them into a U shape.",
    "bees": "Honeybees collect nectar from flowers and turn it into honey inside the wax combs of the hive.",
    "owl": "Owls hunt at night; their large eyes and silent feathers let them catch mice in the dark.",
    "inflation": "Inflation means prices rise over time, so the same amount of money buys fewer goods each year.",
    "mortgage": "A mortgage is a loan used to buy a house, repaid in monthly instalments over many years.",
    "piano": "A piano makes sound when felt hammers strike steel strings as the keys are pressed.",
    "violin": "A violin is played by drawing a bow of horsehair across its four strings.",
    "compiler": "A compiler translates source code written by programmers into machine instructions a processor runs.",
    "firewall": "A firewall filters network traffic and blocks connections that the security rules do not allow.",
    "bread": "Yeast makes dough rise by producing gas bubbles, which gives baked loaves their soft texture.",
    "coffee": "Roasting turns green coffee beans brown and develops the aroma that brewing extracts.",
    "tide": "Ocean tides rise and fall twice a day because the moon's gravity pulls on the seas.",
    "rainbow": "A rainbow appears when sunlight is refracted and reflected inside raindrops, splitting into colours.",
}
ASKED = [("Which organ circulates our blood?", "heart"), ("How do we get oxygen into the body?", "lungs"),
         ("What happens when melted stone reaches the surface of a mountain?", "volcano"),
         ("How are valleys shaped by moving ice?", "glacier"), ("Where does honey come from?", "bees"),
         ("Which bird is a nocturnal predator of rodents?", "owl"), ("Why does money lose its value?", "inflation"),
         ("How do people borrow to purchase a home?", "mortgage"),
         ("What produces the tone of a keyboard instrument?", "piano"),
         ("How is a bowed string instrument played?", "violin"),
         ("What turns a program into something the CPU can execute?", "compiler"),
         ("What stops unwanted connections to a computer network?", "firewall"), ("Why does dough get fluffy?", "bread"),
         ("What gives coffee its smell?", "coffee"), ("Why does the sea level change during the day?", "tide"),
         ("Why do colourful arcs appear in the sky after a shower?", "rainbow")]


def questions(prefix: str = "") -> list[dict]:
    """The golden set; ``prefix``: what the document ids carry (a source's ``<name>:``)."""
    return [{"id": f"q{i}", "question": q, "relevant_doc_ids": [f"{prefix}{d}"]} for i, (q, d) in enumerate(ASKED)]


def titled() -> list[dict]:
    keys = list(DOCS)
    return [{"doc_id": d, "text": t, "metadata": {"title": DOCS[keys[(i + 1) % len(keys)]].split(",")[0]}}
            for i, (d, t) in enumerate(DOCS.items())]


def decoys() -> list[dict]:
    """The documents plus one keyword-stuffed decoy per question."""
    out = [{"doc_id": d, "text": t} for d, t in DOCS.items()]
    for i, (q, _d) in enumerate(ASKED):
        words = " ".join(w for w in re.findall(r"[A-Za-z]+", q) if len(w) > 3)
        out.append({"doc_id": f"decoy{i}", "text": f"Inventory note {i}: the crate labelled '{words}' holds spare "
                    "office chairs and printer paper."})
    return out
