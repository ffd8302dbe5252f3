"""CloudLab profile: N GPU nodes on one LAN, with pcs-ray installed on each (geni-lib, run by the portal).

Parameters: the node count, the hardware type (a GPU type of the chosen
cluster, e.g. c240g5 at Wisconsin: one P100; d7525 at Clemson: two A100s),
the disk image, and the git URL of pcs-ray. Every node clones pcs-ray into
/local/pcs-ray and installs it; the head (node0) keeps the coordinator's
state in /proj (shared by all nodes) so checkpoints resume on any node. Then,
from your workstation: ``cloudlab/bringup.sh node0.<exp>... node1... ...``.
"""

import geni.portal as portal
import geni.rspec.pg as pg

pc = portal.Context()
pc.defineParameter("nodes", "GPU nodes", portal.ParameterType.INTEGER, 2)
pc.defineParameter("hardware", "Hardware type (a GPU node type)", portal.ParameterType.STRING, "c240g5")
pc.defineParameter("image", "Disk image", portal.ParameterType.IMAGE,
                   "urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU22-64-STD")
pc.defineParameter("repo", "pcs-ray git URL", portal.ParameterType.STRING, "https://github.com/pcs-ray/pcs-ray.git")
params = pc.bindParameters()
if params.nodes < 1 or params.nodes > 64:
    pc.reportError(portal.ParameterError("between 1 and 64 nodes", ["nodes"]))
pc.verifyParameters()

request = pc.makeRequestRSpec()
lan = request.LAN("lan0") if params.nodes > 1 else None
INSTALL = ("sudo apt-get update -y && sudo apt-get install -y python3-venv git && "
           "sudo git clone {repo} /local/pcs-ray && sudo chown -R $(id -un) /local/pcs-ray && "
           "cd /local/pcs-ray && python3 -m venv .venv && .venv/bin/pip install -q -e .")
for i in range(params.nodes):
    node = request.RawPC("node%d" % i)
    node.hardware_type = params.hardware
    node.disk_image = params.image
    if lan is not None:
        lan.addInterface(node.addInterface("if%d" % i))
    node.addService(pg.Execute(shell="bash", command=INSTALL.format(repo=params.repo)))
pc.printRequestRSpec(request)
