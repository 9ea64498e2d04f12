import torch

from aot_build import aot_entry


@aot_entry(example_inputs=(torch.randn(4), torch.randn(4)))  # two values, one parameter
def arity(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _no_data() -> tuple[torch.Tensor]:
    raise RuntimeError("the sample file is not there")


@aot_entry(example_inputs=_no_data)
def callable_raises(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@aot_entry(example_inputs=(torch.randn(4),))
def data_dependent(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:  # Python control flow on tensor data
        return x * 2
    return x - 1


@aot_entry(example_inputs=(torch.randn(4, requires_grad=True),))
def calls_backward(x: torch.Tensor) -> torch.Tensor:
    with torch.enable_grad():
        (x * x).sum().backward()  # accumulates into x.grad, which a library cannot set
    return x * 2


class Box:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


@aot_entry(example_inputs=(torch.randn(4),))
def odd_output(x: torch.Tensor) -> Box:
    return Box(x * 2)


@aot_entry(example_inputs=(torch.randn(4), {1, 2}))  # a set: not a tensor or plain value
def bad_example_leaf(x: torch.Tensor, mode: object) -> torch.Tensor:
    return x * 2


@aot_entry(example_inputs=(torch.randn(4),), backward=True)
def grad_mode_branch(x: torch.Tensor) -> torch.Tensor:
    return x * 3 if torch.is_grad_enabled() else x * 2  # training calls run with grad mode on
