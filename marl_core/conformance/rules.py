"""The rule catalog of the conformance checker: stable ids, severities, examples and fixes.

Every rule of ``DESIGN.md`` has an id here. The ids are public API (``--skip RULE``, CI filters):
they never change meaning. ``docs/rules.md`` is generated from this table by
:func:`catalog_markdown`, so the catalog and the documentation cannot drift apart.

Example:
    >>> from marl_core.conformance.rules import RULES
    >>> RULES["api.all-key"].severity
    'error'
    >>> len([rule_id for rule_id, rule in RULES.items() if rule.severity == "warning"])
    7
    >>> RULES["lifecycle.final-obs"].severity
    'warning'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Rule:
    """One conformance rule.

    Attributes:
        id: the stable, public id, e.g. ``"spaces.obs-contains"``.
        severity: ``"error"`` (breaks the contract) or ``"warning"`` (legal but likely a bug).
        summary: one sentence: what a conforming env does.
        example: a few lines of env code that violate the rule.
        fix: how to fix a violation; the default hint of every finding of this rule.
    """

    id: str
    severity: Severity
    summary: str
    example: str
    fix: str


_CATALOG = (
    Rule(
        "api.reset",
        "error",
        "`reset(*, seed=None, options=None)` accepts both keywords (and no argument at all) and "
        "returns a tuple `(obs: dict, infos: dict)`.",
        "def reset(self, seed=None):\n    return {\"a\": self._obs()}          # obs only, no infos",
        "Accept `seed` and `options` as keyword arguments, call `super().reset(seed=seed)` and "
        "return `obs, infos` (two dicts; infos may be `{}`).",
    ),
    Rule(
        "api.step",
        "error",
        "`step(action_dict)` returns five dicts `(obs, rewards, terminateds, truncateds, infos)`; "
        "per-agent flags are bools; it does not raise on valid, legal actions.",
        "def step(self, action_dict):\n    return obs, rewards, dones, infos     # the old 4-tuple",
        "Return `obs, rewards, terminateds, truncateds, infos`, each a dict keyed by agent id, "
        "with `bool` flags.",
    ),
    Rule(
        "api.all-key",
        "error",
        "`\"__all__\"` is in `terminateds` (a bool); in `truncateds` it is optional (missing means "
        "False) but a bool when present.",
        "terminateds = {\"a\": done, \"b\": done}   # no \"__all__\": the episode never ends",
        "Always set `terminateds[\"__all__\"]` (and preferably `truncateds[\"__all__\"]`) to a "
        "`bool`; True ends the episode for every agent.",
    ),
    Rule(
        "ids.known",
        "error",
        "Every key of every returned dict is in `possible_agents`, or `\"__all__\"` (only in "
        "`terminateds`/`truncateds`) or `\"__common__\"` (only in `infos`).",
        "rewards = {\"a\": 1.0, \"referee\": 0.0}  # 'referee' is not in possible_agents",
        "List every agent that may ever appear in `possible_agents`; use `\"__common__\"` in "
        "infos for data that belongs to no agent.",
    ),
    Rule(
        "ids.agents-attr",
        "error",
        "`possible_agents` is a non-empty list of unique ids that stays the same from reset to "
        "reset (tools read it once); `env.agents` lists only known "
        "agents that have not ended (an agent ending in a step is gone from it when the step "
        "returns, unless the step ends the episode), and every agent in the obs dict is in "
        "`env.agents`, except agents ending in this step.",
        "def reset(self, *, seed=None, options=None):\n"
        "    return {\"a\": obs_a, \"b\": obs_b}, {}  # self.agents never set: []",
        "Keep `self.agents` equal to the agents alive now: set it in `reset()`, add joiners and "
        "remove agents when they terminate or truncate.",
    ),
    Rule(
        "ids.strings",
        "warning",
        "Agent ids are strings (OpenSpiel players become `\"player_0\"`, ...), so every tool "
        "can name, sort and serialize them.",
        "self.possible_agents = [0, 1]",
        "Use string ids, e.g. `[\"player_0\", \"player_1\"]`.",
    ),
    Rule(
        "spaces.defined",
        "error",
        "Every agent in `possible_agents` has an observation and an action space (a "
        "`gymnasium.spaces.Space`), from the `observation_spaces`/`action_spaces` dicts or the "
        "`get_observation_space`/`get_action_space` overrides, and keeps them from reset to reset "
        "(tools read them once).",
        "self.action_spaces = {\"a\": Discrete(3)}  # no space for agent 'b'",
        "Give every possible agent both spaces, in the dicts or by overriding "
        "`get_observation_space(agent_id)` / `get_action_space(agent_id)`; set them once, in "
        "`__init__`.",
    ),
    Rule(
        "spaces.obs-contains",
        "error",
        "Every observation is in its agent's observation space, in the space's own form: a numpy "
        "array for a Box (not a list; a numpy scalar only for a shape-() Box, as in gymnasium), a tuple "
        "for a Tuple (not a list), although "
        "gymnasium's `contains` converts those first. A finding names the offending sub-space by "
        "its path and diagnoses dtype and shape.",
        "space = Box(0.0, 1.0, (2,), np.float32)\nobs = np.zeros(2)    # float64, not float32",
        "Build observations with the dtype and shape of the space (e.g. `np.asarray(x, "
        "dtype=np.float32)`), or widen the space.",
    ),
    Rule(
        "rewards.numeric",
        "error",
        "Rewards are finite real numbers (Python or numpy ints and floats, or 0-d arrays of "
        "them; not bools, other arrays or NaN).",
        "rewards = {\"a\": float(\"nan\")}            # or np.array([1.0]), or None",
        "Return one finite `float` per rewarded agent; leave agents without reward out.",
    ),
    Rule(
        "infos.keys",
        "error",
        "`infos` keys are a subset of the obs keys plus `\"__common__\"`, and every value is a "
        "dict.",
        "obs = {\"a\": obs_a}\ninfos = {\"c\": {\"note\": 1}}             # 'c', a possible agent, has no observation",
        "Put infos only under agents that are in the obs dict of the same call, and shared "
        "data under `\"__common__\"`.",
    ),
    Rule(
        "lifecycle.dead-agent",
        "error",
        "An agent that terminated or truncated never appears again in the episode (obs, "
        "terminateds or truncateds).",
        "terminateds[\"b\"] = True      # step 2\n... obs = {\"a\": .., \"b\": ..}   # step 3: 'b' is back",
        "Once an agent's terminated or truncated flag is True, drop it from `self.agents` and "
        "from every later dict of the episode.",
    ),
    Rule(
        "lifecycle.final-obs",
        "warning",
        "An agent that was in the episode and ends in a step has its final observation in that "
        "step's obs dict when it is truncated (by its own flag, or by `\"__all__\"` after it acted) "
        "or terminates while the episode goes on, as the contract's obs dict holds the agents ending "
        "in this very step: a truncated agent's value is estimated from it (RLlib refuses a truncated "
        "agent without one; the trainer here falls back on its previous observation).",
        "terminateds[\"prey_1\"] = True   # caught\nobs = {\"prey_0\": ..}            # no final obs for prey_1",
        "Put every agent that terminates or truncates in a step into that step's obs dict with its "
        "last observation (and drop it from `self.agents`).",
    ),
    Rule(
        "lifecycle.no-actor",
        "error",
        "Until `\"__all__\"` is True, the obs dict names at least one agent that must act.",
        "return {}, rewards, {\"__all__\": False}, {}, {}  # nobody acts, yet not over",
        "Put the agents that must act next in the obs dict, or end the episode with "
        "`\"__all__\"`.",
    ),
    Rule(
        "determinism.seed",
        "error",
        "`reset(seed=s)` and the same actions give identical trajectories (observations, "
        "rewards, flags, who acts), on two fresh instances and on one instance reset again; "
        "the env draws no randomness from numpy's or Python's global generator unless its own "
        "`reset(seed=...)` seeds that generator (two such instances in one process then share it).",
        "def reset(self, *, seed=None, options=None):\n"
        "    self.start = np.random.choice(self.possible_agents)  # global, unseeded",
        "Call `super().reset(seed=seed)` and draw only from `self.np_random`; reset every piece "
        "of episode state in `reset()`.",
    ),
    Rule(
        "pickle",
        "error",
        "The env factory (or the env, when an instance is given) survives a cloudpickle round "
        "trip, as remote rollout workers need.",
        "lock = threading.Lock()\nmake_env = lambda: MyEnv(lock)      # the factory carries a lock\n"
        "# checking an instance: self.log = open(\"env.log\", \"w\") in MyEnv.__init__",
        "Create unpicklable resources lazily (in `reset()`), or implement `__getstate__` / "
        "`__setstate__`.",
    ),
    Rule(
        "masks.valid",
        "error",
        "An `\"action_mask\"` in an acting agent's observation has one 0/1 integer (or bool) entry per "
        "action of its Discrete (or MultiDiscrete) action space, allows at least one action and "
        "sits in the canonical Dict of exactly `\"observation\"` and `\"action_mask\"`. A grouped "
        "agent's members' masks, in the slots of its Tuple observation, fit their slots' spaces "
        "alike; one that allows nothing marks a member that does not act now.",
        "action space Discrete(3)\nobs[\"action_mask\"] = np.ones(4, np.int8)  # 4 entries for 3 actions",
        "Build masks with `marl_core.spaces.mask_from_legal(legal, n)`; end the episode or skip "
        "the agent's turn when it has no legal action.",
    ),
    Rule(
        "masks.in-info",
        "warning",
        "An acting agent's action mask sits in its observation (the canonical Dict), not in its "
        "info: a mask in `info[\"action_mask\"]` is followed by no tool here (this checker, the "
        "trainer, RLlib), so they send actions it forbids.",
        "infos = {\"player_0\": {\"action_mask\": mask}}  # beside an observation without it",
        "Return `{\"observation\": obs, \"action_mask\": mask}` as the observation; PettingZoo envs "
        "that keep masks in info get this from `PettingZooEnv`, Gymnasium envs from "
        "`from_gymnasium(env, mask_info_key=\"action_mask\")`.",
    ),
    Rule(
        "actions.unchanged",
        "warning",
        "`step(action_dict)` leaves the dict it receives, and the actions in it, as they were "
        "(callers keep and log them).",
        "def step(self, action_dict):\n    move = action_dict.pop(self.turn)    # the caller's dict loses a key",
        "Read actions without changing them (`action_dict[agent_id]`, not `pop()`); copy an "
        "array action before changing it in place.",
    ),
    Rule(
        "obs.aliasing",
        "warning",
        "An observation already returned is not changed by later calls (return copies, not "
        "views of the env's state).",
        "self.board[action] = 1\nreturn {\"a\": self.board}, ...     # the same array every step",
        "Return a copy (`self.board.copy()`) so stored trajectories keep their values.",
    ),
    Rule(
        "termination.bounded",
        "warning",
        "Episodes end (`\"__all__\"`) within the checker's `max_steps` under random play.",
        "terminateds = {\"__all__\": False}        # always: the episode never ends",
        "End the episode, or truncate it after a step budget with `truncateds[\"__all__\"] = "
        "True` (or raise the checker's `max_steps`, `--max-steps` of `marl-check`, if the episodes "
        "are long on purpose).",
    ),
    Rule(
        "close.idempotent",
        "warning",
        "`close()` can be called twice (and after a failed run) without raising.",
        "def close(self):\n    self.window.destroy()\n    self.window = None   # second call: AttributeError",
        "Make `close()` check whether there is still something to release.",
    ),
)

RULES: dict[str, Rule] = {rule.id: rule for rule in _CATALOG}
"""Every rule by id, in catalog order."""


def catalog_markdown() -> str:
    """The rule catalog as Markdown (the content of ``docs/rules.md``)."""
    lines = [
        "# Conformance rules",
        "",
        "Generated from `marl_core/conformance/rules.py` (`marl_core.conformance.rules.catalog_markdown()`);",
        "edit the table there, not this page. The ids are public API: `marl-check --skip RULE` and",
        "`check_env(..., skip=(...))` take them, and they never change meaning.",
        "",
        "Run `marl-check mypkg.envs:MyEnv` (add `--json` for CI) or, from Python,",
        "`marl_core.conformance.check_env(MyEnv).raise_if_errors()`. The checker resets once without",
        "arguments (as RLlib does), then with seeds `seed`, `seed + 1`, ... and plays random actions that",
        "respect action masks; it then replays every episode on the same instance and on a fresh one.",
        "Exit status: 0 no errors (warnings allowed), 1 errors found, 2 the target cannot be imported or",
        "built, bad arguments (an unknown `--skip` id, say), a failure of the checker itself, or",
        "`--timeout` stopped the check before it found errors; 130 Ctrl-C; 141 a closed output pipe.",
        "Stopped early, by `--timeout` or Ctrl-C, it reports what it found until then.",
        "Every finding names the rule, the agent, the step, what was expected, what arrived and how to",
        "fix it; a crash in the env's code is a finding with its traceback.",
        "",
        "| id | severity | rule |",
        "|---|---|---|",
    ]
    lines += [f"| `{rule.id}` | {rule.severity} | {rule.summary} |" for rule in _CATALOG]
    for rule in _CATALOG:
        lines += [
            "",
            f"## `{rule.id}` ({rule.severity})",
            "",
            rule.summary,
            "",
            "Violating example:",
            "",
            "```python",
            rule.example,
            "```",
            "",
            f"Fix: {rule.fix}",
        ]
    return "\n".join(lines) + "\n"
