import torch

from aot_build import aot_entry


def _make_scale() -> object:
    scale = torch.full((4,), 2.0)

    def get() -> torch.Tensor:
        return scale  # held in a closure cell: no path from the package's globals reaches it

    return get


scale_of = _make_scale()


@aot_entry(example_inputs=lambda: (torch.randn(4),))
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * scale_of()  # type: ignore[operator]
