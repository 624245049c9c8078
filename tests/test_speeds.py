"""Tests of speeds.py: what separates a side's instances' speed groups."""

from router_latency.speeds import InstanceSpeed, separating_fact


def instance(number, p50, **facts):
    return InstanceSpeed(1, number, p50, facts)


def test_the_gpu_that_separates_the_groups_is_named_before_the_other_facts():
    # GPUs 4-7 slower, one instance a GPU: a GPU per instance tells no group apart (as many
    # values as instances), the cores they ran on do; ports are never a grouping fact
    fast = [instance(n, 10.0, gpu=str(n % 4), cores="0-3", port=8800 + n) for n in range(4)]
    slow = [instance(n, 14.0, gpu=str(4 + n % 4), cores="4-7", port=8804 + n) for n in range(4)]
    fact, tried = separating_fact([fast, slow])
    assert fact == "cores"
    assert "port" not in tried
    # two instances a GPU: the GPU, preferred, is named
    shared = [instance(n, 10.0, gpu="0", port=8800 + n) for n in range(3)]
    apart = [instance(n, 14.0, gpu="1", port=8803 + n) for n in range(3)]
    assert separating_fact([shared, apart])[0] == "gpu"


def test_groups_that_follow_nothing_recorded_say_so():
    # the slow GPU moves between the groups: no fact has each value in one group alone
    mixed = [[instance(1, 10.0, gpu="0"), instance(2, 10.1, gpu="1")],
             [instance(3, 14.0, gpu="0"), instance(4, 14.2, gpu="1")]]
    assert separating_fact(mixed) == (None, ("gpu",))
    # a fact some instance did not record separates nothing
    unknown = [[instance(1, 10.0, gpu="0")], [instance(2, 14.0)]]
    assert separating_fact(unknown)[0] is None
