"""The plan stage (``jarp/warp/_plan``): what a call is turned into before anything is lowered.

Argument binding, launch and output dims, launch checks and Warp's launch limits, static keys, dtypes, runtime
scalars, parameter kinds, string annotations, the source analysis (what a kernel writes, whether its launch may be
split), name resolution, the content text of a plan, the struct argument layout, and preloads.
"""
