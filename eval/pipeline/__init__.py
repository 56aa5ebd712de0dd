"""The step table and its runner (`checks`): which steps run, in what order, under which hold of the GPU."""
