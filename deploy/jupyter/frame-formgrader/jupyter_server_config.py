"""Let JupyterLab show the formgrader in its panel (the local demo's instructors only).

JupyterHub >= 4.1 forbids framing a user's server ("frame-ancestors 'none'"), and nbgrader's
formgrader panel is an iframe, so it stays blank. nbgrader's docs ("Formgrader with
jupyterhub>=4.1") restore "frame-ancestors 'self'"; without per-user subdomains that lets any
page on the hub's origin frame the instructor's server, so it is only for trusted users. In a
real class, open /user/<instructor>/formgrader in its own browser tab instead, or enable
JupyterHub.enable_subdomains.
"""

c = get_config()  # noqa: F821 -- injected by traitlets when Jupyter loads this file

c.ServerApp.tornado_settings = {"headers": {"Content-Security-Policy": "frame-ancestors 'self'"}}
