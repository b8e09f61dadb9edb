"""The shared space helpers: diagnoses, action checks, seeded masked sampling."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from marl_core.errors import (
    IllegalActionError,
    InvalidActionError,
    MissingActionError,
    UnexpectedActionError,
)
from marl_core.spaces import (
    action_mask_of,
    action_mask_size,
    action_masks_of,
    check_action,
    check_action_dict,
    is_masked,
    mask_from_legal,
    masked_space,
    placeholder_observation,
    sample_action,
    surely_valid_action,
    tuple_slots,
    why_not_contained,
)
from tests.fixtures.envs import HeterogeneousSpacesEnv, RockPaperScissors

NESTED = spaces.Dict(
    {
        "observation": spaces.Box(0.0, 1.0, (4,), np.float32),
        "action_mask": spaces.Box(0, 1, (3,), np.int8),
        "extra": spaces.Tuple((spaces.Discrete(2), spaces.Box(-1, 1, (2,), np.float32))),
    }
)


def good_nested() -> dict:
    return {
        "observation": np.zeros(4, np.float32),
        "action_mask": np.ones(3, np.int8),
        "extra": (1, np.zeros(2, np.float32)),
    }


def test_contained_value_has_no_diagnosis() -> None:
    assert why_not_contained(NESTED, good_nested()) is None


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda v: v.update(observation=np.zeros(3, np.float32)), "at ['observation']: shape (3,) but the space needs (4,)"),
        (lambda v: v.update(observation=np.zeros(4, np.float64)), "at ['observation']: dtype float64 but the space needs float32"),
        (lambda v: v.update(observation=[0.0] * 4), "at ['observation']: a list where the space needs a numpy array"),
        (lambda v: v.update(extra=(2, np.zeros(2, np.float32))), "at ['extra'][0]: 2 is outside Discrete(2)"),
        (lambda v: v.update(extra=(1, np.full(2, 3.0, np.float32))), "at ['extra'][1]: value 3.0 at index (0,) is outside"),
        (lambda v: v.pop("action_mask"), "keys ['extra', 'observation'] but the space has"),
    ],
)
def test_diagnosis_names_the_path_and_the_problem(change, expected) -> None:
    value = good_nested()
    change(value)
    reason = why_not_contained(NESTED, value)
    assert reason is not None and expected in reason


def test_multi_discrete_diagnoses_a_dtype_that_does_not_cast() -> None:
    space = spaces.MultiDiscrete([10, 10], dtype=np.int32)
    assert why_not_contained(space, np.array([0, 1])) == "dtype int64 but the space needs int32"
    assert why_not_contained(space, np.array([0, 1], np.int8)) is None
    assert why_not_contained(space, np.array([0, 10], np.int32)) == "array([ 0, 10], dtype=int32) is outside MultiDiscrete([10 10])"


def test_discrete_rejects_floats_and_bools() -> None:
    assert "float" in why_not_contained(spaces.Discrete(3), 1.0)
    assert "bool" in why_not_contained(spaces.Discrete(3), True)
    assert why_not_contained(spaces.Discrete(3), np.int64(2)) is None


def test_discrete_names_an_integer_type_that_does_not_cast() -> None:
    assert why_not_contained(spaces.Discrete(9), np.uint64(2)) == (
        "a uint64 (np.uint64(2)), which does not cast safely to Discrete(9)'s dtype int64"
    )  # it said "2 is outside Discrete(9)"
    assert why_not_contained(spaces.Discrete(9), np.int32(2)) is None


def test_nan_is_named_with_its_index_and_infinity_only_where_bounded() -> None:
    box = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    assert why_not_contained(box, np.float32([0.0, np.nan])) == "contains NaN at index (1,)"
    assert why_not_contained(box, np.float32([np.inf, 0.0])) is None
    assert why_not_contained(spaces.Box(-1, 1, (), np.float32), np.array(np.nan, np.float32)) == "contains NaN"
    assert why_not_contained(spaces.Box(-1, 1, (2,), np.float32), np.float32([0.0, -np.inf])) == (
        "contains infinity at index (1,) where the space is bounded"
    )


class _LegalMoves(spaces.Space):
    """A custom space that samples from state it shares with its env (which holds a lock)."""

    def __init__(self, board: dict) -> None:
        super().__init__((), np.int64)
        self.board = board

    def sample(self, mask=None, probability=None):
        return int(self.np_random.choice(self.board["legal"]))

    def contains(self, x) -> bool:
        return x in self.board["legal"]


def test_sampling_a_custom_space_leaves_its_generator_and_its_references_alone() -> None:
    import threading

    space = _LegalMoves({"legal": [1, 4, 6], "lock": threading.Lock()})  # deepcopy would fail on the lock
    space.seed(5)
    expected = [space.sample() for _ in range(5)]
    space.seed(5)
    drawn = [sample_action(space, np.random.default_rng(seed)) for seed in range(20)]
    assert set(drawn) <= {1, 4, 6} and len(set(drawn)) > 1
    assert [space.sample() for _ in range(5)] == expected  # the env's own draws are as if nothing happened
    graph = spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(3))
    graph.seed(1)
    first = graph.sample()
    graph.seed(1)
    sample_action(graph, np.random.default_rng(0))
    again = graph.sample()
    assert np.array_equal(first.nodes, again.nodes) and np.array_equal(first.edges, again.edges)


class _SelfReferring(spaces.Space):
    """A custom space whose sub-space points back to it, and which holds a lock (no deep copy)."""

    def __init__(self) -> None:
        import threading

        super().__init__((), np.int64)
        self.lock = threading.Lock()
        self.groups = {"pair": [spaces.Discrete(100), spaces.Discrete(100)]}  # spaces in a dict of lists
        for member in self.groups["pair"]:
            member.owner = self

    def seed(self, seed=None):
        for member in self.groups["pair"]:
            member.seed(seed)
        return [seed]

    def sample(self, mask=None, probability=None):
        return tuple(int(member.sample()) for member in self.groups["pair"])

    def contains(self, x) -> bool:
        return True


def test_sampling_a_space_that_cannot_be_copied_puts_every_generator_back() -> None:
    space = _SelfReferring()  # a cycle: the walk over its spaces must end
    space.seed(7)
    expected = [space.sample() for _ in range(3)]
    space.seed(7)
    first = sample_action(space, np.random.default_rng(1))
    assert [space.sample() for _ in range(3)] == expected
    assert sample_action(space, np.random.default_rng(1)) == first  # seeded by the rng given


def test_discrete_reports_integers_too_big_for_its_dtype_instead_of_overflowing() -> None:
    assert "outside Discrete(3)" in why_not_contained(spaces.Discrete(3), 2**70)
    with pytest.raises(InvalidActionError, match="'agent_0'"):
        check_action("agent_0", spaces.Discrete(3), -(2**70))


def test_invalid_action_message_names_agent_expected_received() -> None:
    with pytest.raises(InvalidActionError) as caught:
        check_action("player_1", spaces.Discrete(3), 7)
    message = str(caught.value)
    assert "'player_1'" in message and "Discrete(3)" in message and "received 7" in message


def test_masked_action_is_illegal_and_lists_legal_ones() -> None:
    with pytest.raises(IllegalActionError, match=r"legal actions now: \[0, 2\]"):
        check_action("p", spaces.Discrete(3), 1, mask=np.array([1, 0, 1], np.int8))


def test_a_mask_that_does_not_fit_the_space_is_not_applied() -> None:
    # Which action a wrong-sized mask allows is anyone's guess (the checker's masks.valid names the
    # mask): a short one raised IndexError, a long one refused actions by a misread entry.
    for mask in (np.array([1, 1], np.int8), np.array([1, 1, 0, 1], np.int8)):
        check_action("p", spaces.Discrete(3), 2, mask=mask)
        check_action("team", spaces.Tuple([spaces.Discrete(3)]), (2,), mask=(mask,))
        assert not surely_valid_action(spaces.Discrete(3), 2, mask)  # the fast path leaves it to check_action


def test_action_dict_checks_name_the_agents() -> None:
    env = RockPaperScissors()
    with pytest.raises(UnexpectedActionError, match=r"agent 'player_9' which is not expected to act \(acting now: \['player1'\]\)"):
        check_action_dict(env, {"player_9": 0}, ["player1"])
    with pytest.raises(MissingActionError, match="player2"):
        check_action_dict(env, {"player1": 0}, ["player1", "player2"])


def test_mask_helpers() -> None:
    space = masked_space(spaces.Box(0, 1, (2,)), 5)
    assert is_masked(space) and not is_masked(spaces.Discrete(2))
    assert action_mask_size(spaces.Discrete(5)) == 5
    assert action_mask_size(spaces.MultiDiscrete([2, 3])) == 5
    assert action_mask_size(spaces.Box(0, 1, (2,))) is None
    np.testing.assert_array_equal(mask_from_legal([0, 3], 5), [1, 0, 0, 1, 0])
    assert action_mask_of({"action_mask": [1, 0]}).tolist() == [1, 0]
    assert action_mask_of(np.zeros(2)) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12).filter(any), st.integers(0, 2**32 - 1))
def test_masked_sampling_never_draws_a_masked_action(mask_bits, seed) -> None:
    mask = np.array(mask_bits, np.int8)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        action = sample_action(spaces.Discrete(len(mask)), rng, mask)
        assert mask[action] == 1


def test_masked_sampling_with_no_legal_action_is_an_error() -> None:
    # It said "received 'any action'", which nothing had sent.
    with pytest.raises(IllegalActionError, match=r"^no legal action for agent 'p': its action mask allows none "
                                                 r"\(it needs at least one 1\)$"):
        sample_action(spaces.Discrete(2), np.random.default_rng(0), np.zeros(2, np.int8), "p")
    # Without an agent id the message named "agent None".
    with pytest.raises(IllegalActionError, match=r"^no legal action: its action mask allows none"):
        sample_action(spaces.Discrete(2), np.random.default_rng(0), np.zeros(2, np.int8))

    with pytest.raises(InvalidActionError, match=r"^invalid action: expected an action in Discrete\(2\), received 5"):
        check_action(None, spaces.Discrete(2), 5)


@pytest.mark.parametrize("agent_id", ["box", "discrete", "masked", "multi"])
def test_sampling_is_in_space_and_seeded(agent_id: str) -> None:
    space = HeterogeneousSpacesEnv().get_action_space(agent_id)
    first = [sample_action(space, np.random.default_rng(1)) for _ in range(3)]
    second = [sample_action(space, np.random.default_rng(1)) for _ in range(3)]
    assert all(space.contains(a) for a in first)
    assert repr(first) == repr(second)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint64])
def test_sampling_integer_boxes_up_to_the_dtype_extremes(dtype: type) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(0)
    full = spaces.Box(info.min, info.max, (64,), dtype)
    narrow = spaces.Box(np.full(4, info.max - 1, dtype), np.full(4, info.max, dtype), dtype=dtype)
    one_sided = [] if info.min == 0 else [  # far from 0 on the bounded side
        spaces.Box(info.max // 2, np.inf, (8,), dtype), spaces.Box(-np.inf, info.min // 2, (8,), dtype)]
    for space in (full, narrow, *one_sided):
        action = sample_action(space, rng)
        assert action.dtype == np.dtype(dtype) and space.contains(action)
    assert set(sample_action(narrow, rng).tolist()) <= {int(info.max) - 1, int(info.max)}


def test_spaces_round_trip_through_json() -> None:
    import json

    from marl_core.spaces import space_from_json, space_to_json

    int64 = np.iinfo(np.int64)
    for space in [
        spaces.Box(0, 255, (4, 5, 3), np.uint8),
        spaces.Box(-np.inf, np.inf, (3,), np.float32),
        spaces.Box(np.array([0.0, -1.5]), np.array([1.0, np.inf]), dtype=np.float64),
        spaces.Box(int64.min, int64.max, (2,), np.int64),
        spaces.Discrete(5, start=-2),
        spaces.MultiDiscrete([3, 4], start=[1, 0]),
        spaces.MultiBinary([2, 3]),
        spaces.MultiBinary(4),  # not equal to MultiBinary((4,)) for gymnasium
        spaces.MultiBinary((4,)),
        spaces.Text(12, min_length=1, charset="abc"),
        spaces.Tuple([spaces.Discrete(2), masked_space(spaces.Box(0.0, 1.0, (2,)), 4)]),
        spaces.Box(-np.inf, np.inf, (3,), np.int64),
        spaces.Box(np.array([0, -np.inf]), np.array([5, 7]), dtype=np.int32),
        spaces.Dict([("pos", spaces.Box(0.0, 1.0, (2,))), ("goal", spaces.Discrete(3))]),  # not sorted
        spaces.Dict([(1, spaces.Discrete(2)), (0, spaces.Discrete(3))]),
        spaces.Dict([(1, spaces.Discrete(2)), ("1", spaces.Discrete(3))]),
        spaces.Box(0, 1, (2,), np.bool_),
        spaces.Tuple([spaces.Dict([("b", spaces.Discrete(2)), ("a", spaces.Box(-1.0, 1.0, (), np.float16))])]),
    ]:
        back = space_from_json(json.loads(json.dumps(space_to_json(space), sort_keys=True)))
        assert back == space
        if isinstance(space, spaces.Dict):  # == ignores the order, the model's inputs do not
            assert list(back.spaces) == list(space.spaces)
        if isinstance(space, spaces.Box):
            assert (back.bounded_below == space.bounded_below).all()
            assert (back.bounded_above == space.bounded_above).all()
    assert space_to_json(spaces.Sequence(spaces.Discrete(2))) is None
    assert space_to_json(spaces.Tuple([spaces.Discrete(2), spaces.Graph(spaces.Discrete(2), None)])) is None


def test_sampling_unbounded_and_nested_spaces() -> None:
    space = spaces.Tuple(
        (
            spaces.Box(-np.inf, np.inf, (3,), np.float32),
            spaces.Box(0.0, np.inf, (2,), np.float32),
            spaces.Dict({"k": spaces.MultiBinary(4)}),
        )
    )
    rng = np.random.default_rng(0)
    for _ in range(10):
        assert space.contains(sample_action(space, rng))


def test_grouped_members_get_legal_actions_from_their_slot_masks() -> None:
    from marl_core.spaces import sample_action_for

    member = spaces.Dict({"observation": spaces.Box(0, 1, (1,)), "action_mask": spaces.Box(0, 1, (3,), np.int8)})
    action_space = spaces.Tuple((spaces.Discrete(3), spaces.Discrete(3), spaces.Discrete(2)))
    observation = (
        {"observation": np.zeros(1, np.float32), "action_mask": np.array([0, 0, 1], np.int8)},
        {"observation": np.zeros(1, np.float32), "action_mask": np.array([1, 0, 0], np.int8)},
        0,
    )
    assert member.contains(observation[0])
    rng = np.random.default_rng(0)
    for _ in range(30):
        first, second, third = sample_action_for(action_space, observation, rng, "team")
        assert (first, second) == (2, 0) and third in (0, 1)


@pytest.mark.parametrize(
    ("action", "valid"),
    [
        (np.array([1, 2]), True),
        (np.array([1, 2], np.int8), True),
        ([np.int64(1), 2], True),
        ((1, 2), True),
        (np.array([1, 3]), False),
        (np.array([1.0, 2.0]), False),
        (np.array([1, 2, 0]), False),
        (np.array([[1, 2]]), False),
    ],
)
def test_tuple_actions_take_the_forms_gymnasium_takes(action: object, valid: bool) -> None:
    # A Tuple space takes a tuple, a list or an array (its rows), exactly as gymnasium's contains.
    space = spaces.Tuple((spaces.Discrete(3), spaces.Discrete(3)))
    assert space.contains(action) == valid
    if valid:
        check_action("team", space, action)
    else:
        with pytest.raises(InvalidActionError, match="agent 'team'"):
            check_action("team", space, action)


def test_zero_dimensional_array_for_a_tuple_is_refused_with_our_error() -> None:
    # gymnasium's contains raises TypeError here (len() of an unsized object).
    with pytest.raises(InvalidActionError, match=r"agent 'team'.*an ndarray where the space needs a tuple of 2"):
        check_action("team", spaces.Tuple((spaces.Discrete(3), spaces.Discrete(3))), np.array(1))


def test_tuple_of_boxes_takes_an_array_row_per_slot() -> None:
    space = spaces.Tuple((spaces.Box(-1, 1, (2,)), spaces.Box(-1, 1, (2,))))
    check_action("team", space, np.zeros((2, 2), np.float32))
    with pytest.raises(InvalidActionError, match=r"at \[1\]: .*outside"):
        check_action("team", space, np.array([[0, 0], [0, 5]], np.float32))


def test_an_array_of_the_wrong_length_for_a_tuple_says_so() -> None:
    with pytest.raises(InvalidActionError, match="an array of 3 rows where the space needs a tuple of 2"):
        check_action("team", spaces.Tuple((spaces.Discrete(3), spaces.Discrete(3))), np.array([1, 2, 0]))


def test_slot_masks_govern_each_slot_of_a_tuple_action() -> None:
    space = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (1,)), spaces.Discrete(3)))
    box = np.zeros(1, np.float32)
    masks = action_masks_of(({"observation": 0, "action_mask": np.array([1, 0, 1], np.int8)}, box, np.zeros(2)))
    assert type(masks) is tuple and masks[0].tolist() == [1, 0, 1] and masks[1] is None and masks[2] is None
    check_action("team", space, (2, box, 1), masks)
    with pytest.raises(IllegalActionError, match=r"agent 'team': received 1, legal actions now: \[0, 2\] \(in slot \[0\] of \(1, "):
        check_action("team", space, (1, box, 1), masks)
    with pytest.raises(IllegalActionError, match=r"in slot \[0\] of"):
        check_action("team", space, [1, box, 1], masks)
    # A slot whose mask allows nothing is a member that does not act now: any action goes.
    check_action("team", space, (1, box, 1), (np.zeros(3, np.int8), None, None))
    pair = spaces.Tuple((spaces.Discrete(3), spaces.Discrete(3)))
    pair_masks = (np.array([1, 0, 1], np.int8), np.array([0, 1, 0], np.int8))
    check_action("pair", pair, np.array([2, 1]), pair_masks)
    with pytest.raises(IllegalActionError, match=r"received np.int64\(0\), legal actions now: \[1\] \(in slot \[1\] of array"):
        check_action("pair", pair, np.array([2, 0]), pair_masks)


def test_action_masks_of_reads_the_top_level_mask_first_and_only_tuples_for_slots() -> None:
    mask = np.array([1, 0], np.int8)
    assert action_masks_of({"observation": 0, "action_mask": mask}).tolist() == [1, 0]
    assert action_masks_of((np.zeros(2), 3)) is None
    assert action_masks_of([{"observation": 0, "action_mask": mask}]) is None  # a list is no group
    assert action_masks_of(np.zeros(3)) is None


def test_nested_slot_masks_of_a_group_of_groups() -> None:
    mask = np.array([1, 0, 1], np.int8)
    observation = (({"observation": 0, "action_mask": mask}, 5), np.zeros(2))
    masks = action_masks_of(observation)
    assert masks[0][0].tolist() == [1, 0, 1] and masks[0][1] is None and masks[1] is None
    space = spaces.Tuple((spaces.Tuple((spaces.Discrete(3), spaces.Discrete(2))), spaces.Box(-1, 1, (2,))))
    box = np.zeros(2, np.float32)
    check_action("outer", space, ((2, 1), box), masks)
    with pytest.raises(IllegalActionError, match=r"agent 'outer': received 1, legal actions now: \[0, 2\] \(in slot \[0\]\[0\] of"):
        check_action("outer", space, ((1, 1), box), masks)
    check_action("outer", space, ((1, 1), box), ((np.zeros(3, np.int8), None), None))  # that member does not act


def test_an_array_for_a_tuple_of_scalar_boxes_gives_each_slot_an_array() -> None:
    space = spaces.Tuple((spaces.Box(-1, 1, (), np.float32), spaces.Box(-1, 1, (), np.float32)))
    action = np.array([0.5, -0.5], np.float32)  # gymnasium's contains takes it (casting each row)
    check_action("pair", space, action)
    slots = tuple_slots(space, action)
    assert all(type(slot) is np.ndarray and slot.shape == () for slot in slots)
    with pytest.raises(InvalidActionError, match=r"at \[1\]: .*outside"):
        check_action("pair", space, np.array([0.5, -2.0], np.float32))
    mixed = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32)))
    check_action("mixed", mixed, np.array([1, np.zeros(2, np.float32)], dtype=object))


def test_a_multidiscrete_action_is_checked_against_each_dimensions_mask() -> None:
    # Masks of MultiDiscrete spaces (one per dimension, concatenated) were never applied.
    space = spaces.MultiDiscrete([3, 2], start=[1, -1])
    mask = np.array([1, 0, 1, 0, 1], np.int8)  # first dimension: 1 or 3; second: 0
    check_action("a", space, np.array([3, 0]), mask)
    with pytest.raises(IllegalActionError, match=r"received array\(\[2, 0\]\), legal actions now: \[\[1, 3\], \[0\]\] "
                                                 r"\(masked out by its action_mask, per dimension\)"):
        check_action("a", space, np.array([2, 0]), mask)
    with pytest.raises(IllegalActionError):
        check_action("a", space, np.array([1, -1]), mask)


@pytest.mark.parametrize(
    "space", [spaces.Discrete(2, dtype=np.int32), spaces.Discrete(3, start=-1, dtype=np.int8)], ids=["int32", "int8"]
)
def test_sampled_discrete_actions_come_in_the_spaces_dtype(space: spaces.Discrete) -> None:
    # They came as np.int64, which check_action (as gymnasium) refuses for these spaces.
    rng = np.random.default_rng(0)
    mask = np.ones(space.n, dtype=np.int8)
    for action in [sample_action(space, rng) for _ in range(20)] + [sample_action(space, rng, mask) for _ in range(20)]:
        assert type(action) is space.dtype.type and space.contains(action)
        check_action("a", space, action, mask)


def test_a_multidiscrete_mask_that_allows_nothing_in_a_dimension_is_named() -> None:
    # The dimension was drawn unmasked: an action its own mask forbids.
    with pytest.raises(IllegalActionError, match=r"^no legal action for agent 'a': its action mask allows none in dimension 1"):
        sample_action(spaces.MultiDiscrete([2, 3]), np.random.default_rng(0), np.array([1, 0, 0, 0, 0]), "a")


@pytest.mark.parametrize("mask", [[0, 0, 0, 0, 1], [[1, 0, 0]]], ids=["longer", "two-dimensional"])
def test_a_mask_that_does_not_fit_the_space_is_not_applied_when_sampling_or_checking(mask: list) -> None:
    # The longer one made the sampler return 4 for Discrete(3); the 2-d one was a bare IndexError.
    space, rng = spaces.Discrete(3), np.random.default_rng(0)
    drawn = {int(sample_action(space, rng, np.array(mask))) for _ in range(60)}
    assert drawn == {0, 1, 2}
    for action in range(3):
        check_action("a", space, action, np.array(mask))
        assert not surely_valid_action(space, action, np.array(mask))  # left to check_action


def test_a_numpy_scalar_is_a_shape_free_box_action() -> None:
    # np.clip or arithmetic on a 0-d action gives a numpy scalar, which gymnasium's Box takes.
    box = spaces.Box(-1.0, 1.0, (), np.float32)
    check_action("a", box, np.float32(0.5))
    check_action("a", box, np.clip(np.array(3.0, dtype=np.float32), -1, 1))
    with pytest.raises(InvalidActionError, match="dtype float64 but the space needs float32"):
        check_action("a", box, np.float64(0.5))
    with pytest.raises(InvalidActionError, match=r"value 2.0 at index \(\) is outside \[-1.0, 1.0\]"):
        check_action("a", box, np.float32(2.0))
    with pytest.raises(InvalidActionError, match="a float32 where the space needs a numpy array"):
        check_action("a", spaces.Box(-1.0, 1.0, (2,), np.float32), np.float32(0.5))


def test_a_tuple_of_masks_is_read_per_slot_by_the_sampler_as_by_the_check() -> None:
    # For a Discrete space the sampler applied (0, 1, 0) as one mask while check_action ignored it;
    # for a Tuple space per-slot masks were an error or ignored.
    rng = np.random.default_rng(0)
    assert {int(sample_action(spaces.Discrete(3), rng, (0, 1, 0))) for _ in range(60)} == {0, 1, 2}
    pair = spaces.Tuple((spaces.Discrete(3), spaces.Discrete(2)))
    slot_masks = (np.array([0, 0, 1], np.int8), np.array([0, 0], np.int8))  # the second member does not act
    drawn = [sample_action(pair, rng, slot_masks, "group") for _ in range(60)]
    assert {int(first) for first, _ in drawn} == {2} and {int(second) for _, second in drawn} == {0, 1}
    for action in drawn:
        check_action("group", pair, action, slot_masks)


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(-1.0, 1.0, (2, 3), np.float32),
        spaces.Box(2, 5, (3,), np.int16),  # zeros clipped into the bounds
        spaces.Discrete(3),
        spaces.Discrete(3, start=4, dtype=np.int16),  # it was an int64 4, outside an int16 space
        spaces.Discrete(2, start=-1, dtype=np.int8),
        spaces.MultiDiscrete([3, 4], start=[1, 2]),
        spaces.MultiBinary([2, 2]),
        spaces.Text(5, min_length=2, charset="xyz"),
        spaces.Tuple([spaces.Discrete(2, dtype=np.int8), spaces.Box(0, 1, (1,))]),
        spaces.Dict({"observation": spaces.Box(0, 1, (2,)), "action_mask": spaces.Box(0, 1, (3,), np.int8)}),
    ],
    ids=repr,
)
def test_a_placeholder_observation_is_inside_its_space(space: spaces.Space) -> None:
    assert space.contains(placeholder_observation(space))


class _PairRecord(tuple):
    """A tuple type with ``_fields`` built from one iterable and a keyword (not as a namedtuple is)."""

    _fields = ("x", "y")

    def __new__(cls, items=(), scale=1):
        return super().__new__(cls, items)


def test_gymnasiums_tuple_form_of_a_mask_is_read_flat_in_observations_and_infos() -> None:
    from marl_core.spaces import action_mask_of

    parts = (np.array([1, 0], np.int8), np.array([0, 1, 1], np.int8))
    assert action_mask_of({"action_mask": parts}).tolist() == [1, 0, 0, 1, 1]
    assert action_mask_of({"action_mask": (1, 0, 1)}).tolist() == [1, 0, 1]  # a plain tuple of entries
    ragged = action_mask_of({"action_mask": [[1, 0], [1]]})  # numpy cannot make one array of it
    assert ragged.dtype == object and ragged.shape == (1,)
    assert action_mask_of({"observation": 1}) is None and action_mask_of(3) is None
    # In an info too (it was "an action_mask that is not an array"), checked as a flat mask.
    from marl_core.errors import EnvContractError
    from marl_core.spaces import mask_from_info

    moved = mask_from_info("a", parts, spaces.MultiDiscrete([2, 3]))
    assert moved.dtype == np.int8 and moved.tolist() == [1, 0, 0, 1, 1]
    with pytest.raises(EnvContractError, match=r"agent 'a' got an action_mask of shape \(5,\), but its action space "
                                               r"MultiDiscrete\(\[3 3\]\) needs \(6,\)"):
        mask_from_info("a", parts, spaces.MultiDiscrete([3, 3]))


class _Tagged(tuple):
    """A tuple subclass that keeps an attribute beside its items."""


def test_snapshot_keeps_tuples_of_unchanging_items_and_copies_arrays_in_namedtuples() -> None:
    # The record's constructor refused snapshot's namedtuple call (the checker itself raised), or
    # took the items for other arguments: a record of two became one of three zeros.
    from collections import namedtuple

    from marl_core.spaces import snapshot

    record = _PairRecord((1, 2))
    assert snapshot(record) is record
    Pair = namedtuple("Pair", "x y")
    pair = Pair(np.zeros(2), 3)
    copied = snapshot(pair)
    assert type(copied) is Pair and copied.x is not pair.x and copied.y == 3
    record = _PairRecord((np.zeros(3), 2))
    copied = snapshot(record)  # built without its constructor: the items are the items
    assert type(copied) is _PairRecord and len(copied) == 2 and copied[1] == 2 and copied[0] is not record[0]
    # A tuple subclass (a plain one, one keeping attributes beside its items) stays what it is:
    # copied as a plain tuple, an unchanged action was reported as changed (actions.unchanged).
    tagged = _Tagged((np.ones(2), 5))
    tagged.label = "move"
    copied = snapshot(tagged)
    assert type(copied) is _Tagged and copied.label == "move" and copied[0] is not tagged[0] and copied[1] == 5
    LabelledPair = type("LabelledPair", (Pair,), {})  # a namedtuple's subclass has a __dict__
    labelled = LabelledPair(np.zeros(1), 1)
    labelled.note = "kept"
    copied = snapshot(labelled)
    assert type(copied) is LabelledPair and copied.note == "kept" and copied.x is not labelled.x


def test_snapshot_copies_dict_subclasses_as_what_they_are() -> None:
    # A same-step autoreset turned an env's OrderedDict rewards and defaultdict flags into plain dicts.
    from collections import OrderedDict, defaultdict

    from marl_core.spaces import snapshot

    flags = defaultdict(bool, {"a": np.zeros(2)})
    copied = snapshot(flags)
    assert type(copied) is defaultdict and copied["missing"] is False
    assert copied["a"] is not flags["a"]
    assert type(snapshot(OrderedDict(a=1))) is OrderedDict
