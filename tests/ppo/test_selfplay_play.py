"""The terminal game loop of ``marl-play``, driven with scripted input streams."""

from __future__ import annotations

import io

import numpy as np
import pytest

from marl_core.ppo.selfplay_cli import play_human, render_board


def leftmost(observation):
    return int(np.flatnonzero(observation["action_mask"])[0])


def run(script: str, **kwargs):
    out = io.StringIO()
    score = play_human(leftmost, input_stream=io.StringIO(script), output=out, **kwargs)
    return score, out.getvalue()


def test_person_wins_as_first_player_and_the_board_is_drawn_after_every_move():
    # The policy stacks column 1; the person builds the bottom row 4-5-6-7 and wins.
    score, text = run("1\n4\n5\n6\n7\nn\n")
    assert score == {"won": 1, "drawn": 0, "lost": 0}
    assert "You play x (first)." in text
    assert "You win!" in text
    # 4 moves by the person, 3 by the policy: the board after each, plus the starting board.
    assert text.count("  1 2 3 4 5 6 7") == 8
    assert text.count("The policy plays column 1.") == 3
    final_board = text.split("You win!")[0].rsplit("| . . . . . . . |", 1)[-1]
    assert "| o . . . . . . |" in final_board and "| o . . x x x x |" in final_board
    assert text.rstrip().endswith("Bye. You won 1, drew 0, lost 0.")


def test_garbage_and_illegal_input_are_asked_again():
    # Second seat: the policy opens in column 1. The person fills column 1 with the policy's help,
    # then types garbage, an out-of-range number and the full column before a legal move.
    script = "2\n" + "1\n" * 3 + "hello\n\n9\n0\n-3\n1.5\n1\n2\n" + "q\n"
    score, text = run(script)
    assert "You play o (second)." in text
    assert "'hello' is not a column: type a number from 1 to 7." in text
    assert "'' is not a column" in text and "'9' is not a column" in text and "'0' is not a column" in text
    assert "'-3' is not a column" in text and "'1.5' is not a column" in text
    assert "Column 1 is full; legal columns: 2 3 4 5 6 7." in text
    assert "The policy plays column 2." in text  # the move after the person's legal column 2
    assert score == {"won": 0, "drawn": 0, "lost": 0}
    assert text.rstrip().endswith("Bye. You won 0, drew 0, lost 0.")


def test_seat_question_is_asked_again_on_garbage():
    _, text = run("3\nfirst please\n1\nq\n")
    assert text.count("Please type 1 to move first or 2 to move second.") == 2
    assert "You play x (first)." in text


def test_end_of_input_leaves_cleanly_at_every_question():
    for script in ("", "1\n", "1\n4\n", "1\n4\n5\n6\n7\n", "1\n4\n5\n6\n7\nmaybe\n"):
        _, text = run(script)
        assert text.rstrip().endswith("lost 0."), script
    assert "Please answer y or n." in run("1\n4\n5\n6\n7\nmaybe\n")[1]


def test_several_games_with_a_fixed_seat_and_the_policy_winning():
    # Person moves second and plays column 7 every time: the policy's column-1 stack wins.
    score, text = run("7\n7\n7\ny\n7\n7\n7\nno\n", seat=1)
    assert score == {"won": 0, "drawn": 0, "lost": 2}
    assert text.count("You lose.") == 2
    assert "Play first" not in text


class CtrlCAfter(io.StringIO):
    """The person's answers, then Ctrl-C at the next question."""

    def readline(self, *args):
        line = super().readline(*args)
        if not line:
            raise KeyboardInterrupt
        return line


def test_ctrl_c_says_the_score_of_the_games_finished_before_it_stops():
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):  # marl-play turns it into status 130
        play_human(leftmost, input_stream=CtrlCAfter("1\n4\n5\n6\n7\ny\n1\n"), output=out)
    text = out.getvalue()
    assert "You win!" in text and text.count("You play x (first).") == 2
    assert text.endswith("Your move (column 1-7, q to quit): \nBye. You won 1, drew 0, lost 0.\n")


def test_render_board_marks_and_numbers():
    from bridges.openspiel import OpenSpielEnv

    env = OpenSpielEnv("connect_four")
    env.reset(seed=0)
    env.step({"player_0": 3})
    env.step({"player_1": 3})
    lines = render_board(env.state).splitlines()
    assert lines[-3:] == ["| . . . x . . . |", "+---------------+", "  1 2 3 4 5 6 7"]
    assert lines[-4] == "| . . . o . . . |"
    assert len(lines) == 8
