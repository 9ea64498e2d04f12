"""Guards: what a compiled entry depends on beyond its arguments, and how each call checks it.

One package, one module per job:

* :mod:`.paths`: where a value lives (roots and steps), followed in Python;
* :mod:`.checks`: the kinds of check made on the value at a path, each defined once;
* :mod:`.tree`: a variant's guards as a tree of paths, the manifest's form;
* :mod:`.capture`: build side, the reads recorded by torch.compile's tracer, translated;
* :mod:`.upgrade`: guards of older manifests read into a tree;
* :mod:`.bound`: run side, the tree bound in this process and checked per call;
* :mod:`.native`: the C evaluator of a bound tree (compiled into the wheel);
* :mod:`.weights`: run side, the weights kept and passed to the library;
* :mod:`.cached`: run side, what an ``lru_cache`` helper that answers a tensor holds;
* :mod:`.traced`: Python spellings of builtins the tracer cannot follow, traced in their place.

Importing this package imports nothing else (torch included).
"""
