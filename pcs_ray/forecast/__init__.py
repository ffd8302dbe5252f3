"""Forecasts: forward plays of a cluster's state that never change it.

``Engine.predict`` plays a fork of the engine (``Engine.play_forward``), or, for a policy with a queue
form, a ``QueuePlay`` that gives the same finish times recomputing only what each event touches;
``simulate`` chains the plays of successive arrivals (``PlayChain``). Every play decides with its own
policy state (``SchedulingPolicy.fork``), so a forecast cannot change the schedule it forecasts.
"""

from pcs_ray.forecast.chain import PlayChain
from pcs_ray.forecast.decision import Decision, Front
from pcs_ray.forecast.queue_play import QueuePlay, plays_itself, queue_play

__all__ = ["Decision", "Front", "PlayChain", "QueuePlay", "plays_itself", "queue_play"]
