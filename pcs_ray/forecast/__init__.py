"""Forecasts: forward plays of a cluster's state that never change it.

``Engine.play_ahead`` plays a fork of the engine (``Engine.play_forward``), or, for a policy with a queue
form, a ``QueuePlay`` that gives the same finish times recomputing only what each event touches;
``simulate`` chains the plays of successive arrivals (``PlayChain``), and where every job holds all it can
use it plays nothing and takes only the finishes that changed since (``Engine.final_changes``), folded into
the same records as a whole forecast would be; the live coordinator branches a new
job's forecast from its latest whole play (``BranchPoints``). Every play decides with its own
policy state (``SchedulingPolicy.fork``), so a forecast cannot change the schedule it forecasts.

One family of verbs names it across engine, model and coordinator: a name that begins with ``play_``
plays forward (``Engine.play_forward`` on itself; ``play_ahead`` on a copy; ``play_detached`` a play
that runs apart from its source; ``ClusterModel.play_branch`` from branch points;
``Coordinator.play_refresh``, ``begin_play_refresh``/``end_play_refresh`` and ``play_submission``);
anything else reads what a play left (``Coordinator.prediction``, and the API's ``predict`` query).
"""

from pcs_ray.forecast.branch_points import BranchPoints
from pcs_ray.forecast.chain import PlayChain
from pcs_ray.forecast.decision import Decision, Front
from pcs_ray.forecast.queue_play import QueuePlay, plays_itself, queue_play

__all__ = ["BranchPoints", "Decision", "Front", "PlayChain", "QueuePlay", "plays_itself", "queue_play"]
