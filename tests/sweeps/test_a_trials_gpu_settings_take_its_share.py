"""A trial's GPU settings (sweeps/trainable.py ``gpu_settings``): its share of the GPU as the memory
share, on top of the switches ``DISGEN_GPU_SETTINGS`` sets."""


def test_a_trials_gpu_settings_take_its_share_of_the_gpu(monkeypatch):
    from sweeps.trainable import gpu_settings

    monkeypatch.setenv("DISGEN_GPU_SETTINGS", "tf32=off")
    settings = gpu_settings(0.25)
    assert settings.memory_share == 0.25 and settings.tf32 is False  # the share, on top of the switches
    assert gpu_settings(2).memory_share == 1.0  # more than one GPU: a process still uses one
    monkeypatch.delenv("DISGEN_GPU_SETTINGS")
    assert gpu_settings(0).memory_share == 1.0 and gpu_settings(0).tf32
