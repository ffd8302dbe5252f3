"""Forecasts: forward plays of a cluster's state that never change it.

``Engine.predict`` plays a fork of the engine (``Engine.play_forward``), or, for a policy with a queue
form, a ``QueuePlay`` that gives the same finish times recomputing only what each event touches;
``simulate`` chains the plays of successive arrivals (``PlayChain``); the live coordinator branches a new
job's forecast from its latest whole play (``BranchPoints``). Every play decides with its own
policy state (``SchedulingPolicy.fork``), so a forecast cannot change the schedule it forecasts.
"""

from pcs_ray.forecast.branch_points import BranchPoints
from pcs_ray.forecast.chain import PlayChain
from pcs_ray.forecast.decision import Decision, Front
from pcs_ray.forecast.queue_play import QueuePlay, plays_itself, queue_play

__all__ = ["BranchPoints", "Decision", "Front", "PlayChain", "QueuePlay", "plays_itself", "queue_play"]
