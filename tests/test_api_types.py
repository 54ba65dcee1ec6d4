"""The Python API's argument types (issue 29 item 13): a wrong type raises TypeError
naming the argument, before any work; bool is not a number; a right type outside the
allowed set raises ValueError naming the argument.  Every public entry point below is
called with each of its arguments replaced, one at a time, by values of wrong types."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_attention.adam import AdamOptions, train_layer
from amp_attention.checks import ArgumentTypeError, Flag, Integer, InstanceOf, OneOf, Real, check_args
from amp_attention.data import generate_dataset
from amp_attention.erm import direct_erm
from amp_attention.gamp import GAMPOptions
from amp_attention.solvers.bayes_optimal import solve_bayes_optimal
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution
from amp_attention.solvers.thresholds import interpolation_threshold, perfect_recovery_threshold
from amp_attention.spec import Learner, PowerLawTarget, Problem, SpikedTarget, Task, WishartTarget

#: values that are no real number, no integer, no flag, no string and no object of ours
NOT_A_NUMBER = [True, None, "1e-8", 1 + 2j, [1.0], object()]
NOT_A_COUNT = [True, None, "3", 1 + 0j, [3]]
NOT_A_FLAG = ["yes", 1, 0, None, 1.0]
NOT_A_CHOICE = [None, 1, True, ["linear"]]

P = Problem()

#: entry point -> (callable, valid keyword arguments, {argument: wrong values})
ENTRY_POINTS = {
    "Task": (Task, {}, {"L": NOT_A_COUNT, "beta": NOT_A_NUMBER, "noise": NOT_A_NUMBER,
                        "noise_at": NOT_A_CHOICE}),
    "WishartTarget": (WishartTarget, {}, {"kappa0": NOT_A_NUMBER}),
    "SpikedTarget": (SpikedTarget, {}, {"kappa0": NOT_A_NUMBER}),
    "PowerLawTarget": (PowerLawTarget, {}, {"gamma": NOT_A_NUMBER, "d": NOT_A_COUNT,
                                            "Q0": NOT_A_NUMBER}),
    "Learner": (Learner, {}, {"kappa": NOT_A_NUMBER, "lam": NOT_A_NUMBER,
                              "parameterisation": NOT_A_CHOICE}),
    "Problem": (Problem, {}, {"task": [None, "linear", 1], "target": [None, "wishart"],
                              "learner": [None, 0.1], "alpha": NOT_A_NUMBER}),
    "solve_state_evolution": (solve_state_evolution, {"problem": P}, {
        "problem": [None, "x", 1.0], "tol": NOT_A_NUMBER, "max_iter": NOT_A_COUNT,
        "damping": NOT_A_NUMBER, "method": NOT_A_CHOICE, "start": NOT_A_CHOICE,
        "spectrum": NOT_A_FLAG, "progress": NOT_A_FLAG, "finite_size_check": NOT_A_FLAG,
        "mc": [1, "fast"], "finite_d": [1, "yes"]}),
    "solve_bayes_optimal": (solve_bayes_optimal, {"problem": P}, {
        "problem": [None, 1.0], "tol": NOT_A_NUMBER, "max_iter": NOT_A_COUNT,
        "start": NOT_A_CHOICE}),
    "MonteCarloOptions": (MonteCarloOptions, {}, {"log2_n": NOT_A_COUNT, "replicas": NOT_A_COUNT,
                                                  "seed": NOT_A_COUNT}),
    "AdamOptions": (AdamOptions, {}, {"lr": NOT_A_NUMBER, "max_iter": NOT_A_COUNT,
                                      "tol": NOT_A_NUMBER, "batch_size": [True, "8", 2.5]}),
    "GAMPOptions": (GAMPOptions, {}, {"max_iter": NOT_A_COUNT, "tol": NOT_A_NUMBER,
                                      "damping": NOT_A_NUMBER}),
    "generate_dataset": (generate_dataset, {"problem": P, "d": 8, "seed": 0}, {
        "problem": [None, 1.0], "d": NOT_A_COUNT, "seed": NOT_A_COUNT}),
    "direct_erm": (direct_erm, {"problem": P, "d": 8, "seed": 0}, {
        "problem": [None, 1.0], "d": NOT_A_COUNT, "seed": NOT_A_COUNT,
        "tol": [v for v in NOT_A_NUMBER if v is not None],          # None: the default tol
        "max_iter": [v for v in NOT_A_COUNT if v is not None]}),
    "train_layer": (train_layer, {"problem": P, "d": 8, "seed": 0}, {
        "problem": [None, 1.0], "d": NOT_A_COUNT, "seed": NOT_A_COUNT,
        "init_scale": NOT_A_NUMBER}),
    "interpolation_threshold": (interpolation_threshold, {"problem": P}, {"problem": [None, 1.0]}),
    "perfect_recovery_threshold": (perfect_recovery_threshold, {"problem": P}, {
        "problem": [None, 1.0], "sigma": NOT_A_NUMBER}),
}

CASES = [(name, arg, value) for name, (_, _, bad) in ENTRY_POINTS.items()
         for arg, values in bad.items() for value in values]


@pytest.mark.parametrize("name,arg,value", CASES,
                         ids=[f"{n}-{a}-{type(v).__name__}" for n, a, v in CASES])
def test_wrong_types_raise_type_error_naming_the_argument(name, arg, value):
    fn, base, _ = ENTRY_POINTS[name]
    with pytest.raises(TypeError) as exc:
        fn(**{**base, arg: value})
    assert arg in str(exc.value)


@pytest.mark.parametrize("fn,kwargs,arg", [
    (Learner, {"kappa": -1.0}, "kappa"), (Learner, {"lam": math.nan}, "lam"),
    (Task, {"L": 0}, "L"), (Problem, {"alpha": 0.0}, "alpha"),
    (solve_state_evolution, {"problem": P, "tol": -1.0}, "tol"),
    (solve_state_evolution, {"problem": P, "max_iter": 0}, "max_iter"),
    (solve_state_evolution, {"problem": P, "damping": 1.5}, "damping"),
    (solve_state_evolution, {"problem": P, "method": "newton"}, "method"),
    (MonteCarloOptions, {"log2_n": 0}, "log2_n"),
])
def test_right_type_out_of_range_raises_value_error(fn, kwargs, arg):
    with pytest.raises(ValueError) as exc:
        fn(**kwargs)
    assert not isinstance(exc.value, TypeError)
    assert arg in str(exc.value)


def test_numpy_scalars_are_numbers():
    assert Learner(kappa=np.float64(0.5), lam=np.float32(0.25)).kappa == 0.5
    assert Task(L=np.int64(2), channel="softmax").L == 2
    assert solve_state_evolution(Problem(alpha=np.float64(0.5)), max_iter=np.int32(200)).success


def test_constraints():
    """The declarative helper itself: types, bounds, open ends, 0 allowed, messages."""
    c = {"x": Real(0.0, 1.0, lo_open=True, why="a probability"), "n": Integer(1, 10),
         "how": OneOf(("a", "b")), "on": Flag(), "p": InstanceOf((Problem,), "a Problem")}
    out = check_args(c, x=np.float32(0.5), n=np.int8(3), how="a", on=np.bool_(True), p=P)
    assert out == {"x": 0.5, "n": 3, "how": "a", "on": True, "p": P}
    assert type(out["n"]) is int and type(out["on"]) is bool
    for kw, kind, text in [({"x": 0.0}, ValueError, "x must lie in (0, 1] (a probability), got 0.0"),
                           ({"x": math.nan}, ValueError, "(0, 1]"),
                           ({"x": False}, ArgumentTypeError, "x must be a real number, got bool False"),
                           ({"n": 11}, ValueError, "n must be an integer in [1, 10], got 11"),
                           ({"n": 3.0}, ArgumentTypeError, "got float 3.0"),
                           ({"how": "c"}, ValueError, "how must be one of a, b; got 'c'"),
                           ({"on": 1}, ArgumentTypeError, "on must be True or False, got int 1"),
                           ({"p": None}, ArgumentTypeError, "p must be a Problem, got NoneType None")]:
        with pytest.raises(kind) as exc:
            check_args(c, **kw)
        assert text in str(exc.value)
    assert Real(0.0, 1.0, lo_open=True, zero_ok=True).check("y", 0.0) == 0.0
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)
