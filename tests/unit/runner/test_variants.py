"""Variants: deterministic on task_id:variant, variant 0 the original, honest rewordings, custom functions."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from faultproxy.tasks.task_model import Task
from faultproxy.runner.variants import (
    Variant,
    load_variant_function,
    make_variant,
    make_variants,
    variant_seed,
)

from tests.support.layout import ROOT

REPO = ROOT

TASKS = [
    Task("refund_order_1001", "Refund order 1001; the item arrived broken.", states=("default", "vip", "fraud")),
    Task("order_status.1002", "What is the status of order 1002?"),
    Task("cancel-ORD-7F3A", 'Please cancel order ORD-7F3A for "Jane Doe".', states=("pending", "shipped")),
    Task("t4", "I was charged twice for SKU_12 (invoice INV-2024-0042); fix it."),
]


def dump(variants: list[Variant]) -> list[dict]:
    return [v.to_json() for v in variants]


# --- determinism --------------------------------------------------------------------------------


def test_variant_zero_is_the_original() -> None:
    for task in TASKS:
        v = make_variant(task, 0)
        assert v.prompt == task.prompt
        assert v.state == (task.states[0] if task.states else None)
        assert (v.task_id, v.index, v.seed) == (task.id, 0, variant_seed(task.id, 0))


def test_the_same_variant_every_time_whatever_the_global_random() -> None:
    random.seed(1)
    first = dump([make_variant(t, i) for t in TASKS for i in range(10)])
    random.seed(2)
    before = random.getstate()
    second = dump([make_variant(t, i) for t in TASKS for i in range(10)])
    assert first == second
    assert random.getstate() == before  # the global random is never drawn from


def test_variants_do_not_depend_on_order_or_on_other_tasks() -> None:
    forward = {(t.id, i): make_variant(t, i) for t in TASKS for i in range(8)}
    backward = {(t.id, i): make_variant(t, i) for t in reversed(TASKS) for i in reversed(range(8))}
    assert forward == backward
    assert make_variants(TASKS[0], 8) == [forward[(TASKS[0].id, i)] for i in range(8)]


def test_variants_are_the_same_in_another_process() -> None:
    code = textwrap.dedent("""\
        import json, sys
        from faultproxy.tasks.task_model import Task
        from faultproxy.runner.variants import make_variant
        tasks = [Task.from_json(t) for t in json.load(sys.stdin)]
        print(json.dumps([make_variant(t, i).to_json() for t in tasks for i in range(10)]))
        """)
    here = dump([make_variant(t, i) for t in TASKS for i in range(10)])
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)}
        result = subprocess.run([sys.executable, "-c", code], input=json.dumps([t.to_json() for t in TASKS]),
                                capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=True)
        assert json.loads(result.stdout) == here


def test_seed_is_a_stable_31_bit_hash_of_task_and_variant() -> None:
    expected = int.from_bytes(hashlib.sha256(b"refund_order_1001:3").digest()[:4], "big") & 0x7FFFFFFF
    assert variant_seed("refund_order_1001", 3) == expected
    assert make_variant(TASKS[0], 3).seed == expected
    seeds = {variant_seed(t.id, i) for t in TASKS for i in range(50)}
    assert len(seeds) == len(TASKS) * 50
    assert all(0 <= s < 2**31 for s in seeds)


# --- variety and honesty ------------------------------------------------------------------------


def test_eight_variants_vary() -> None:
    for task in TASKS:
        variants = make_variants(task, 8)
        prompts = [v.prompt for v in variants]
        assert len(set(prompts)) >= 3, prompts
        assert all(p != task.prompt for p in prompts[1:]), prompts  # no variant past 0 is a plain copy
        if len(task.states) > 1:
            assert len({v.state for v in variants}) > 1
            assert all(v.state in task.states for v in variants)
        else:
            assert all(v.state is None for v in variants)
    kinds = Counter()
    for task, i in itertools.product(TASKS, range(1, 40)):
        prompt = make_variant(task, i).prompt
        kinds["lower"] += prompt == prompt.lower() or prompt.startswith(tuple("abcdefghijklmnopqrstuvwxyz"))
        kinds["need"] += "I need " in prompt
        kinds["thorough"] += prompt.endswith("Please be thorough.")
        kinds["if_you_can"] += ", if you can" in prompt
        kinds["context"] += ": " in prompt.split(task.prompt[:4], 1)[0]
    assert all(kinds[k] > 0 for k in ("lower", "need", "thorough", "if_you_can", "context")), kinds


SUBJECTS = ["order 1001", "order #77", "ticket ORD-7F3A", "SKU_12", "invoice INV-2024-0042",
            "customer bob@example.com", "the VIP account 0042", "item 3.5kg", "version v2.1.0",
            'the note "Fragile. Handle with care."', "user 'Ann-Marie'", "path /api/v1/orders/9",
            "cart `c_91`", "“Blue Mug” x2"]
FRAMES = ["Refund {}.", "Please cancel {}", "What is the status of {}?", "I want a refund for {}!",
          "Check {} and tell me the total", "can you look up {}?", "Move {} to the archive... now.",
          "Email the customer about {}; then close it.", "Update {}", "{} needs a refund."]

_QUOTED = re.compile(r'"[^"\n]*"|“[^”\n]*”|`[^`\n]*`|(?<!\w)\'[^\'\n]*\'(?!\w)')


def _identifiers(text: str) -> list[str]:
    """Tokens a rewording must keep verbatim: anything with a digit, _, @, / or #, or a capital
    after its first letter."""
    tokens = [t.strip(".,;:!?()[]{}<>\"'“”‘’`") for t in _QUOTED.sub(" ", text).split()]
    return [t for t in tokens if any(c.isdigit() or c in "_@/#" for c in t) or any(c.isupper() for c in t[1:])]


def _core(prompt: str) -> str:
    """The prompt's words as a rewording keeps them, up to casing: no leading "please", no final ./?/!."""
    core = prompt.strip().rstrip(".?!").rstrip()
    return re.sub(r"(?i)^please\s+", "", core).lower()


def test_rewordings_keep_every_digit_id_and_quotation() -> None:
    prompts = [frame.format(subject) for frame, subject in itertools.product(FRAMES, SUBJECTS)]
    assert len(prompts) >= 100
    for n, prompt in enumerate(prompts):
        task = Task(f"task_{n}", prompt)
        for i in range(12):
            variant = make_variant(task, i).prompt
            assert Counter(re.findall(r"\d+", variant)) == Counter(re.findall(r"\d+", prompt)), (prompt, variant)
            for quoted in _QUOTED.findall(prompt):
                assert quoted in variant, (prompt, variant, quoted)
            for identifier in _identifiers(prompt):
                assert identifier in variant, (prompt, variant, identifier)
            assert _core(prompt) in variant.lower(), (prompt, variant)  # only casing changed in the request


# --- custom variant functions -------------------------------------------------------------------


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"user_variants_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""\
        import random

        def rephrase(task, index):
            rng = random.Random(f"{task['id']}:{index}")
            return {"prompt": f"[{index}] " + task["prompt"], "state": rng.choice(task["states"] or [None])}

        def nothing(task, index):
            return None

        def unknown_key(task, index):
            return {"promt": "x"}

        def bad_state(task, index):
            return {"state": "nowhere"}

        def empty_prompt(task, index):
            return {"prompt": ""}

        def raises(task, index):
            raise RuntimeError("boom")

        def returns_list(task, index):
            return ["x"]

        def one_argument(task):
            return {}

        NOT_CALLABLE = 3

        class Holder:
            @staticmethod
            def make(task, index):
                return {"prompt": task["prompt"].upper()}
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_custom_function_overrides_prompt_and_state(user_module: str) -> None:
    function = load_variant_function(f"{user_module}:rephrase")
    task = TASKS[0]
    for i in range(5):
        v = make_variant(task, i, function)
        assert v.prompt == f"[{i}] {task.prompt}"
        assert v.state in task.states
        assert v.seed == variant_seed(task.id, i)
        assert make_variant(task, i, f"{user_module}:rephrase") == v  # a spec works as well
    assert make_variant(task, 2, f"{user_module}:nothing") == make_variant(task, 2)
    assert make_variant(task, 2, f"{user_module}:Holder.make").prompt == task.prompt.upper()
    assert make_variants(task.to_json(), 3, f"{user_module}:rephrase")[2].prompt == f"[2] {task.prompt}"


@pytest.mark.parametrize("function, phrase", [
    ("unknown_key", "returned unknown key(s) 'promt'; it may override only 'prompt' and 'state'"),
    ("bad_state", "returned state 'nowhere', which the task does not declare (states: default, vip, fraud)"),
    ("empty_prompt", "returned a prompt that is not a non-empty string"),
    ("raises", "raised RuntimeError: boom"),
    ("returns_list", "must return a dict of overrides"),
])
def test_custom_function_misbehaving(user_module: str, function: str, phrase: str) -> None:
    with pytest.raises(ValueError) as caught:
        make_variant(TASKS[0], 1, f"{user_module}:{function}")
    message = str(caught.value)
    assert f"variant function {user_module}:{function} (task 'refund_order_1001', variant 1)" in message
    assert phrase in message


@pytest.mark.parametrize("spec, phrase", [
    ("no_colon", 'expected "module:function"'),
    ("a:b:c", 'expected "module:function"'),
    ("surely_not_a_module_xyz:f", "no module named 'surely_not_a_module_xyz'"),
    ("{m}:rephrse", "has no attribute 'rephrse' (did you mean 'rephrase'?)"),
    ("{m}:NOT_CALLABLE", "'NOT_CALLABLE' is a int, not a function"),
    ("{m}:one_argument", "it must accept (task_json, index)"),
])
def test_load_variant_function_errors(user_module: str, spec: str, phrase: str) -> None:
    spec = spec.format(m=user_module)
    with pytest.raises(ValueError) as caught:
        load_variant_function(spec)
    assert f"variant function {spec!r}" in str(caught.value)
    assert phrase in str(caught.value)


def test_load_variant_function_reports_a_failing_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_variants_mod.py").write_text("import surely_missing_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="importing 'broken_variants_mod' failed: No module named "
                                         "'surely_missing_dependency_xyz'"):
        load_variant_function("broken_variants_mod:f")


def test_load_variant_function_finds_modules_in_the_current_directory(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd_variants_mod.py").write_text("def f(task, index):\n    return {'prompt': 'cwd'}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = list(sys.path)
    assert make_variant(TASKS[1], 1, "cwd_variants_mod:f").prompt == "cwd"
    assert sys.path == before
    sys.modules.pop("cwd_variants_mod", None)


def test_bad_index() -> None:
    with pytest.raises(ValueError, match="a variant index is an integer >= 0"):
        make_variant(TASKS[0], -1)


def test_variant_json_round_trip() -> None:
    v = make_variant(TASKS[0], 5)
    assert Variant.from_json(json.loads(json.dumps(v.to_json()))) == v
