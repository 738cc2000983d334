"""Writes chat_sft.jsonl: the conversations the chat_sft examples fine-tune on, in TRL's conversational format
(one object a line, {"messages": [{"role": ..., "content": ...}, ...]}: what SFTTrainer and
acc_dataset_from_files read as a chat dataset). Synthetic and deterministic: capitals, arithmetic and colours,
asked in a few ways. Run: python3 examples/data/make_chat_sft.py"""
import json
import os
import random

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid", "Germany": "Berlin",
            "Canada": "Ottawa", "Egypt": "Cairo", "Kenya": "Nairobi", "Peru": "Lima", "Chile": "Santiago",
            "Norway": "Oslo", "Sweden": "Stockholm", "Poland": "Warsaw", "Greece": "Athens", "China": "Beijing",
            "India": "New Delhi", "Brazil": "Brasilia", "Mexico": "Mexico City", "Cuba": "Havana", "Ireland": "Dublin",
            "Portugal": "Lisbon", "Austria": "Vienna", "Hungary": "Budapest", "Finland": "Helsinki",
            "Denmark": "Copenhagen", "Vietnam": "Hanoi", "Thailand": "Bangkok", "Turkey": "Ankara",
            "Argentina": "Buenos Aires", "Australia": "Canberra"}
COLOURS = {"the sky": "blue", "grass": "green", "snow": "white", "coal": "black", "a banana": "yellow",
           "a tomato": "red", "an orange": "orange", "a plum": "purple"}
SYSTEM = "You are a helpful assistant."


def conversations(rng):
    out = []
    for country, city in CAPITALS.items():
        for q in (f"What is the capital of {country}?", f"Which city is the capital of {country}?",
                  f"Tell me the capital of {country}."):
            out.append([{"role": "user", "content": q},
                        {"role": "assistant", "content": f"The capital of {country} is {city}."}])
    for thing, colour in COLOURS.items():
        for q in (f"What colour is {thing}?", f"Which colour is {thing}?"):
            out.append([{"role": "user", "content": q},
                        {"role": "assistant", "content": f"{thing[0].upper() + thing[1:]} is {colour}."}])
    for _ in range(150):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        out.append([{"role": "user", "content": f"What is {a} plus {b}?"},
                    {"role": "assistant", "content": f"{a} plus {b} is {a + b}."}])
    for conv in out[::4]:
        conv.insert(0, {"role": "system", "content": SYSTEM})
    rng.shuffle(out)
    return out


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_sft.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for conv in conversations(random.Random(0)):
            f.write(json.dumps({"messages": conv}, ensure_ascii=False) + "\n")
    print(path)
