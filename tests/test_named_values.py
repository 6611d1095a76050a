"""A value looked up by name that is no name (a mapping, a list) is refused naming the setting, not as "unhashable"."""

from __future__ import annotations

import pytest

from tune_runner.errors import UserError, unknown_name
from tune_runner.registry import Registry


@pytest.mark.parametrize("word, kind", [({"fcnet_hiddens": [16]}, "a dict"), (["relu"], "a list"), (3, "an int")])
def test_a_registry_answers_a_value_that_is_no_name_with_its_choices(word, kind):
    registry: Registry[object] = Registry("model")
    registry.register("mlp", object())
    assert word not in registry
    with pytest.raises(UserError) as caught:
        registry.get(word)
    assert str(caught.value) == f"model must be a name (mlp), got {word!r} ({kind.replace('an int', 'a int')})"
    assert unknown_name("model", word, ["mlp"]) == str(caught.value)


def test_the_activation_names_checked_without_torch_are_the_policys():
    from tune_runner import tune_rl_policy
    from tune_runner.algos.config_checks import ACTIVATIONS

    assert ACTIVATIONS == tuple(sorted(tune_rl_policy.ACTIVATIONS))


@pytest.mark.parametrize("values, message", [
    ({"model": {"fcnet_hiddens": [16, 16]}}, "model must be a name (cnn, ..., mlp), got {'fcnet_hiddens': [16, 16]}"),
    ({"fcnet_activation": {"kind": "relu"}}, "fcnet_activation must be a name (elu, relu, silu, tanh), got {'kind'"),
    ({"fcnet_hiddens": {"a": 1}}, "fcnet_hiddens must be a list of layer sizes like [64, 64], got fcnet_hiddens={'a'"),
    ({"fcnet_hiddens": [64, 0.5]}, "fcnet_hiddens must be a list of layer sizes like [64, 64]"),
    ({"env_backend": ["torch"]}, "env_backend must be a name (auto, gymnasium, torch), got ['torch'] (a list)"),
])
@pytest.mark.parametrize("learner", ["PPOConfig", "DQNConfig"])
def test_our_configs_name_the_setting_a_mistyped_name_stands_in(values, message, learner):
    from tune_runner.algos import config

    with pytest.raises(ValueError) as caught:
        getattr(config, learner).from_dict(values)
    if "(cnn, ..., mlp)" in message:  # the models registered by then: ours, and any another test registered
        head, _, tail = message.partition("(cnn, ..., mlp)")
        assert str(caught.value).startswith(head) or head in str(caught.value)
        named = str(caught.value).split(head, 1)[1].split(")", 1)[0].strip("(").split(", ")
        assert {"cnn", "mlp"} <= set(named) and tail in str(caught.value), str(caught.value)
        return
    assert message in str(caught.value)

