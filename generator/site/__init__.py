"""The static site: Reports rendered into public/ (model, family and index pages, JSON twins, CSS).

`build.run_build` builds the whole site from the snapshot; `build.render_model_page` renders one
model page, also as a self-contained file for `neurarch-trace MODEL --html FILE`.
"""
