"""A model as an argument of compiled programs: its array constants as leaves, the rest as a key.

A model (:class:`models.BayesianModel`, the identifiable models) holds array constants: the
data's normalisers, the prior's locations and scales, the identifiable geometry's conditioning.
A program that closes over the model embeds them, so two models that differ only in those
values (a variant's two priors, a system's three dataset kinds) are traced, lowered and loaded
once each, although their compiled programs are identical (docs/measurements.md, "what a
group's later cells spend on programs": 9-11 s of each such grid cell).

:func:`model_argument` wraps a model in a :class:`ModelArgument`, a JAX pytree whose leaves are
those constants and whose tree structure is the rest of the model, compared by value. A
``jax.jit`` function that takes it as an argument is traced once for every model of the same
structure, and each call computes with its own model's values. Inside the trace,
``held_model(argument)`` is the model rebuilt around the traced leaves.

What counts as a constant (a leaf):

- numpy or JAX float arrays with at least one dimension;
- lists and tuples of Python floats that are values of a dict (``ModelSpec.scales``), rebuilt
  as lists / tuples of traced scalars. Elsewhere they stay in the structure (e.g. a fixed
  ``ModelSpec.noise_scale``, which the model reads with numpy).

A dataclass may name fields that no traced computation reads in a class attribute
``untraced_fields`` (a model's ``prior`` and its spec's prior name: the prior's values are in
the sites' Gaussians, which are leaves). They are left out of the structure, so a variant's
two priors share their programs; inside a trace such a field holds a stand-in that raises
``TypeError`` when used, so a computation that did read it fails loudly instead of using the
prior of the model that was traced first.

Everything else is part of the structure. Dataclasses other than robots (rebuilt field by
field, without running ``__init__``), named tuples, tuples, lists and dicts are walked; other
objects are compared by value where they hash (strings, numbers, robots, types, functions) and
by identity where they do not. A robot is a constant: it compares by value, and the dynamics
read its parameters with numpy. Python float scalars stay in the structure, so models that
differ in one compile apart. Two models with the same structure therefore compute the same
function of their leaves.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

import bayes_nea as bn

_LEAF, _CONST, _ARRAY, _SEQ, _FLOATS, _DICT, _NAMED, _DATACLASS, _UNTRACED = range(9)


class Untraced:
    """Stand-in, inside a trace, for a field a dataclass lists in ``untraced_fields``: any use
    but ``repr`` raises ``TypeError`` naming the field."""

    __slots__ = ("field",)

    def __init__(self, field: str):
        object.__setattr__(self, "field", field)

    def _refuse(self, *_, **__):
        raise TypeError(
            f"{self.field!r} is not an argument of this compiled program (it is left out of "
            "models.arguments.ModelArgument's structure); read it outside the traced function"
        )

    def __getattr__(self, name):
        if name.startswith("__"):  # protocol probes (hasattr(x, "__jax_array__")) stay probes
            raise AttributeError(name)
        self._refuse()

    __str__ = __format__ = __bool__ = __hash__ = __eq__ = __ne__ = _refuse
    __len__ = __iter__ = __contains__ = _refuse
    __setattr__ = __call__ = __getitem__ = _refuse

    def __repr__(self):
        return f"Untraced({self.field!r})"


def _is_constant_array(x) -> bool:
    return (
        isinstance(x, (np.ndarray, jax.Array))
        and np.issubdtype(x.dtype, np.floating)
        and x.ndim >= 1
    )


def _split(obj, leaves: list, memo: dict, in_dict: bool = False):
    """The skeleton of ``obj`` (nested tuples), its constants appended to ``leaves``."""
    if id(obj) in memo:
        return memo[id(obj)][1]
    if _is_constant_array(obj):
        leaves.append(obj)
        node = (_LEAF, len(leaves) - 1)
    elif isinstance(obj, np.ndarray):
        node = (_ARRAY, obj.dtype.str, obj.shape, obj.tobytes())
    elif in_dict and type(obj) in (list, tuple) and obj and all(type(x) is float for x in obj):
        leaves.append(np.asarray(obj, np.float64))
        node = (_FLOATS, type(obj), len(leaves) - 1, len(obj))
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        node = (_NAMED, type(obj), tuple(_split(x, leaves, memo) for x in obj))
    elif type(obj) in (list, tuple):
        node = (_SEQ, type(obj), tuple(_split(x, leaves, memo) for x in obj))
    elif type(obj) is dict:
        node = (_DICT, tuple((k, _split(v, leaves, memo, True)) for k, v in obj.items()))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, (type, bn.Robot)):
        untraced = getattr(obj, "untraced_fields", ())
        fields = tuple(
            (f.name, (_UNTRACED, f.name) if f.name in untraced
             else _split(getattr(obj, f.name), leaves, memo))
            for f in dataclasses.fields(obj)
        )
        node = (_DATACLASS, type(obj), fields)
    else:
        node = (_CONST, obj)
    memo[id(obj)] = (obj, node)  # obj kept alive: ids stay unique while splitting
    return node


def _join(node, leaves):
    tag = node[0]
    if tag == _LEAF:
        return leaves[node[1]]
    if tag == _CONST:
        return node[1]
    if tag == _UNTRACED:
        return Untraced(node[1])
    if tag == _ARRAY:
        return np.frombuffer(node[3], dtype=np.dtype(node[1])).reshape(node[2]).copy()
    if tag == _FLOATS:  # leaves may be placeholders (e.g. shapes while lowering)
        values = leaves[node[2]]
        try:
            return node[1](values[i] for i in range(node[3]))
        except TypeError:
            return node[1]([values] * node[3])
    if tag == _NAMED:
        return node[1](*(_join(x, leaves) for x in node[2]))
    if tag == _SEQ:
        return node[1](_join(x, leaves) for x in node[2])
    if tag == _DICT:
        return {k: _join(v, leaves) for k, v in node[1]}
    obj = object.__new__(node[1])
    for name, value in node[2]:
        object.__setattr__(obj, name, _join(value, leaves))
    return obj


def _key(node, leaves_meta):
    """A hashable, by-value form of a skeleton (leaves by shape and dtype)."""
    tag = node[0]
    if tag == _LEAF:
        return (tag, leaves_meta[node[1]])
    if tag == _CONST:
        try:
            hash(node[1])
        except TypeError:
            return (tag, "id", id(node[1]))
        return (tag, type(node[1]), node[1])
    if tag in (_ARRAY, _UNTRACED):
        return node
    if tag == _FLOATS:
        return (tag, node[1], leaves_meta[node[2]])
    if tag in (_NAMED, _SEQ):
        return (tag, node[1], tuple(_key(x, leaves_meta) for x in node[2]))
    if tag == _DICT:
        return (tag, tuple((k, _key(v, leaves_meta)) for k, v in node[1]))
    return (tag, node[1], tuple((n, _key(v, leaves_meta)) for n, v in node[2]))


class _Structure:
    """A model's skeleton, equal to another with the same by-value key."""

    __slots__ = ("node", "key", "hash", "objects")

    def __init__(self, node, leaves, objects):
        meta = tuple((tuple(np.shape(x)), str(np.asarray(x).dtype)) for x in leaves)
        self.node = node
        self.key = _key(node, meta)
        self.hash = hash(self.key)
        self.objects = objects  # keeps every walked object alive, so ids in the key stay unique

    def __eq__(self, other):
        return isinstance(other, _Structure) and self.hash == other.hash and self.key == other.key

    def __hash__(self):
        return self.hash


class ModelArgument:
    """A model as a JAX pytree (module docstring); ``bayes_model`` is the model it holds."""

    def __init__(self, bayes_model, structure: _Structure | None = None, leaves=None):
        self.bayes_model = bayes_model
        self._structure = structure
        self._leaves = leaves

    def _flat(self):
        if self._structure is None:
            leaves, memo = [], {}
            node = _split(self.bayes_model, leaves, memo)
            self._structure = _Structure(node, leaves, [obj for obj, _ in memo.values()])
            self._leaves = leaves
        return self._leaves, self._structure


def _flatten(argument: ModelArgument):
    return argument._flat()


def _unflatten(structure: _Structure, leaves) -> ModelArgument:
    leaves = list(leaves)
    return ModelArgument(_join(structure.node, leaves), structure, leaves)


jax.tree_util.register_pytree_node(ModelArgument, _flatten, _unflatten)


def model_argument(bayes_model) -> ModelArgument:
    """``bayes_model`` as a :class:`ModelArgument`: pass it to a jitted function instead of
    closing over the model, and read the model back with :func:`held_model` inside."""
    return bayes_model if isinstance(bayes_model, ModelArgument) else ModelArgument(bayes_model)


def held_model(bayes_model):
    """The model a :class:`ModelArgument` holds; any other model unchanged."""
    return bayes_model.bayes_model if isinstance(bayes_model, ModelArgument) else bayes_model


class SharedStatic:
    """A static argument of a ``jax.jit`` function that equals any other with the same ``key``.

    ``value`` is what the program uses (an SVI object, a sampler): the program traced for the
    first caller with a key serves every later caller with an equal key, with the first's
    ``value``. The key must therefore name everything of ``value`` that the program depends on
    besides its traced arguments (a model enters as a :class:`ModelArgument`, compared by its
    structure).
    """

    __slots__ = ("key", "value")

    def __init__(self, key, value):
        hash(key)  # a key that does not hash is a caller's error, not a cache miss
        self.key = key
        self.value = value

    def __eq__(self, other):
        return isinstance(other, SharedStatic) and self.key == other.key

    def __hash__(self):
        return hash(self.key)
