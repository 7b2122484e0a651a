"""Where an experiment's runs execute and what they log: the ``executor`` and ``logging``
blocks of the experiment file (:mod:`.schema`); neither changes results."""

from __future__ import annotations

import importlib.util
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .schema_types import Bool, Float, Int, _Strict

MAX_JOBS = 1_024
MAX_CPUS_PER_RUN = 1_024
MAX_GPUS_PER_RUN = 64
MAX_RETRIES = 100


class ExecutorSpec(_Strict):
    """Where the runs execute: a local process pool (default) or a Ray cluster."""

    type: Literal["process", "ray"] = "process"
    address: str | None = Field(
        default=None,
        min_length=1,
        description="ray only: 'auto' (the cluster running on this machine), 'HOST:PORT' of "
        "a head node, or 'ray://HOST:PORT'; default: start a local cluster",
    )
    jobs: Annotated[Int, Field(gt=0, le=MAX_JOBS)] | None = Field(
        default=None,
        description="runs at a time: processes of the pool (default 1); with ray, most runs "
        "in flight (default: as many as the cluster has room for)",
    )
    cpus_per_run: Annotated[Float, Field(gt=0, le=MAX_CPUS_PER_RUN)] = Field(
        default=1, description="ray only: CPUs each run requests"
    )
    gpus_per_run: Annotated[Float, Field(ge=0, le=MAX_GPUS_PER_RUN)] = Field(
        default=0, description="ray only: GPUs each run requests"
    )
    max_retries: Annotated[Int, Field(ge=0, le=MAX_RETRIES)] = Field(
        default=2, description="ray only: retries of a run whose worker process died"
    )

    @model_validator(mode="after")
    def _ray_only(self) -> ExecutorSpec:
        if self.type == "process" and self.address is not None:
            raise ValueError(
                f"address {self.address!r} is for the ray executor; set type: ray or drop it"
            )
        return self


class LoggingSpec(_Strict):
    """What each run logs besides its rows of episodes.csv."""

    tensorboard: Bool = Field(
        default=False, description="TensorBoard scalars of each run in runs/<run>/tb/ (the "
        "tensorboard extra; the process executor)")

    @field_validator("tensorboard")
    @classmethod
    def _installed(cls, value: bool) -> bool:
        if value and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("tensorboard is not installed: pip install 'langadapt[tensorboard]'")
        return value
