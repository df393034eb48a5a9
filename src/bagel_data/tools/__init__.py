"""Tools around the pipeline: preparing data in the BAGEL formats and inspecting packs.

Submodules are imported on use (`bagel_data.tools.prepare`, `bagel_data.tools.inspect`,
`bagel_data.tools.commands`), so importing this package costs nothing and plotting stays an
optional dependency.
"""
