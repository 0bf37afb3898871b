"""Simulated kube-scheduler that calls scheduler extenders over the real wire contract and allocates
ResourceClaims as its DynamicResources plugin does."""

from sim.scheduler.config import ConfigError, ExtenderConfig, SchedulerConfig, load, parse
from sim.scheduler.scheduler import Scheduler, Stats

__all__ = ["ConfigError", "ExtenderConfig", "Scheduler", "SchedulerConfig", "Stats", "load", "parse"]
