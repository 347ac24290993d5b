"""The process node: kubelet and scheduler stand-in that runs pod containers as processes.

``node`` registers the Node and watches pods; ``scheduling`` decides what it may bind;
``pods`` drives one pod's lifecycle using ``containers`` (process groups), ``env``
(variables and ``$(VAR)`` expansion), ``volumes`` (host directories and the mountPath
rewrite), ``serviceaccount`` (per-pod kubeconfig), ``probes``, ``images`` (image → host
tools mapping), ``podips`` (loopback pod IPs), ``status`` (what is reported) and ``logs``
(where output goes). Run it with ``python -m devenv.processnode --help``.
"""
