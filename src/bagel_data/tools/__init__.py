"""Tools around the pipeline: preparing data in the BAGEL formats and inspecting packs.

Submodules are imported on use (`bagel_data.tools.prepare`, `bagel_data.tools.inspect.packs`,
`bagel_data.cli.tools`), so importing this package costs nothing and plotting stays an
optional dependency.
"""
