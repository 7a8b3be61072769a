"""The leak search of the access tests (tests/support/access_world.py) finds what it must and
nothing else."""

import pytest

from tests.support.access_world import leaks

pytestmark = pytest.mark.unit


def test_a_hidden_id_is_found_as_a_word_not_as_letters_of_random_hex():
    # A span's resource holds a random uuid4; "c0a" and "c1b" are hidden community ids.
    assert leaks('{"service.instance.id": "1d9c0a3e-1054-4c1b-beb1-70df50b0ab45"}', ()) == []
    assert leaks('{"community": "c0a", "units": ["uv_ledger"]}', ()) == ["c0a", "uv_ledger"]
    assert leaks("cited [r3] and r9.", ()) == ["r3", "r9"]


def test_a_vault_secret_is_found_in_any_case_and_the_callers_question_is_not_a_leak():
    question = "What is the door code of the Zephyrine Vault?"
    assert leaks(question, (question,)) == []
    assert leaks("the answer: e_port", (question,)) == ["e_port"]
    assert leaks("It was paid in MoonPearl.", (question,)) == ["moonpearl"]
