"""The run settings (`sensviz.settings`): one definition each, read where they were defined before, and the
parameter count P computed without building a model equal to the built model's."""

import pytest

from sensviz import blowup, cube, losses, measure, models, params, settings, training
from sensviz.settings import ModelSettings


def test_each_setting_and_constant_is_one_object_read_from_its_old_home():
    assert models.ModelSettings is settings.ModelSettings
    assert training.TrainConfig is settings.TrainConfig and measure.MeasureSettings is settings.MeasureSettings
    assert (training.PER_MODEL_FIELDS, training.PER_MEMBER_STOPPING) == (settings.PER_MODEL_FIELDS,
                                                                         settings.PER_MEMBER_STOPPING)
    assert (cube.EXACT_LIMIT, losses.LOSSES, params.DECODER_STEPS, blowup.STACKS) == (
        settings.EXACT_LIMIT, settings.LOSSES, settings.DECODER_STEPS, settings.STACKS)
    assert tuple(models.ARCHITECTURES) == settings.ARCHITECTURES  # the names the settings accept: those built


@pytest.mark.parametrize("arch", settings.ARCHITECTURES)
@pytest.mark.parametrize(("d_model", "n_layers", "n_heads", "d_ff"), [(8, 1, 2, 0), (16, 3, 4, 24), (128, 2, 2, 0)])
def test_the_parameter_count_without_building_is_the_built_models(arch, d_model, n_layers, n_heads, d_ff):
    chosen = ModelSettings(arch, d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=d_ff)
    assert chosen.n_params(6) == chosen.build(6, seed=0).n_params()


def test_the_encoder_count_by_hand():
    # d = 32, two layers, d_ff = d: embedding 32; per layer 4·32² + 2·32·32 + 9·32 + 32 = 6464; read-out 33
    assert ModelSettings("encoder", d_model=32, n_layers=2).n_params(8) == 32 + 2 * 6464 + 33 == 12993


def test_what_needs_torch_still_checks_its_input():
    with pytest.raises(ValueError, match="unknown device 'nonsense'"):
        settings.TrainConfig(device="nonsense")
    assert settings.TrainConfig(loss="bce").encoding.name == "logit"
