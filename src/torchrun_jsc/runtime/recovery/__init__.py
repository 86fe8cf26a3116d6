"""Going on after a lost node: the rounds as the watch counts them (``rounds``), the spares'
look for a round that formed without them (``spares``) and the rendezvous host's place in every
round (``host_place``, pure). It imports ``store``, the watch's vocabulary, ``timing`` and
:mod:`torchrun_jsc.handover`; the session and the patches import it."""
