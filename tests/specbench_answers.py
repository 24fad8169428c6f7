"""Hand-written Spec-Bench answer files, shared by test_interop.py, test_app_interop.py and
test_app_browser_interop.py: two methods and a baseline over three questions, and `answer_file`, which
writes rows the way Spec-Bench's eval.py does.

Not a test module (no test_ prefix): pytest does not collect it, and importing it brings in no tests."""

import json

# Two methods and a baseline over three questions (two MT-bench, one translation), written by hand
# the way Spec-Bench's eval.py writes them: accept_lengths concatenated over turns.
QUESTIONS = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now another."]},
    {"question_id": 101, "category": "reasoning", "turns": ["Why?", "Why not?"]},
    {"question_id": 161, "category": "translation", "turns": ["Translate German to English: Hallo"]},
]
SPS = [  # question_id, category, turns text, new_tokens, wall_time, accept_lengths, decoding_steps
    (81, "writing", ["a b c d e f", "g h i j"], [6, 4], [0.30, 0.20], [3, 2, 1, 3, 1], [3, 2]),
    (101, "reasoning", ["k l m", "n o p q r"], [3, 5], [0.10, 0.25], [2, 1, 4, 1], [2, 2]),
    (161, "translation", ["s t u v w x y"], [7], [0.40], [4, 2, 1], [3]),
]
PLD = [
    (81, "writing", ["a b c d e f", "g h i j"], [6, 4], [0.45, 0.35], [1, 2, 3, 1, 1, 2], [4, 2]),
    (101, "reasoning", ["k l m", "n o p q r"], [3, 5], [0.20, 0.50], [1, 1, 1, 5], [3, 1]),
    (161, "translation", ["s t u v w x y"], [7], [0.30], [6, 1], [2]),
]
VANILLA = [
    (81, "writing", ["a b c d e f", "g h i j"], [6, 4], [0.60, 0.40], [1] * 10, [6, 4]),
    (101, "reasoning", ["k l m", "n o p q r"], [3, 5], [0.30, 0.50], [1] * 8, [3, 5]),
    (161, "translation", ["s t u v w x y"], [7], [0.70], [1] * 7, [7]),
]


def answer_file(path, rows, model_id):
    with open(path, "w") as f:
        for qid, cat, turns, new, wall, acc, steps in rows:
            f.write(json.dumps({"question_id": qid, "category": cat, "answer_id": f"x{qid}", "model_id": model_id,
                                "choices": [{"index": 0, "turns": turns, "decoding_steps": steps, "new_tokens": new,
                                             "wall_time": wall, "accept_lengths": acc}], "tstamp": 0.0}) + "\n")
    return path
