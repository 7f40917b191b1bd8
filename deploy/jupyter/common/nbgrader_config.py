"""nbgrader settings shared by every user of the course's hub (students and instructors).

nbgrader's documentation puts this file in /etc/jupyter/nbgrader_config.py; here the hub puts
this directory on each server's JUPYTER_CONFIG_PATH (deploy/jupyterhub_config.py), and the
Kubernetes image copies it to /etc/jupyter (deploy/z2jh/Dockerfile). The hub sets the variables.
"""

import os

from autograder.validation import validate_within_bounds

c = get_config()  # noqa: F821 -- injected by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = "attention"
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE_ROOT", "/srv/nbgrader/exchange")

# Validate, on every server (as the course's nbgrader_config.py sets it): nbgrader's own steps,
# after a check that refuses, in grading's words, a notebook that grading would refuse.
validate_within_bounds(c)

if os.environ.get("ATTN_ROLE") == "instructor":
    if os.environ.get("ATTN_COURSE_DIR"):
        c.CourseDirectory.root = os.environ["ATTN_COURSE_DIR"]
    # The course's collect, feedback release and inbound list, as the course's
    # nbgrader_config.py sets them, also for a course directory copied before they existed.
    c.ExchangeFactory.collect = "autograder.collect.CheckedCollect"
    c.ExchangeFactory.release_feedback = "autograder.student_folders.FolderReleaseFeedback"
    c.ExchangeFactory.list = "autograder.student_folders.FolderList"
    # On Kubernetes each student's server mounts only its own folders of the exchange
    # (deploy/z2jh/values.yaml); the instructor's collects from, lists and releases
    # feedback into them.
    if os.environ.get("ATTN_STUDENT_FOLDERS") == "1":
        c.StudentFolders.enabled = True
elif os.environ.get("ATTN_STUDENT_ID"):
    # Servers that share one OS account (the demo's SimpleLocalProcessSpawner) submit under the
    # hub user's name. With one account per user, or as `jovyan` on Kubernetes (nbgrader then
    # reads JUPYTERHUB_USER itself), this is not needed.
    c.CourseDirectory.student_id = os.environ["ATTN_STUDENT_ID"]

# Collecting sets aside a submission whose files are not owned by an account of the same name;
# that cannot hold when every server runs as one account (the demo, or `jovyan` on Kubernetes).
if os.environ.get("ATTN_CHECK_OWNER") == "0":
    c.ExchangeCollect.check_owner = False
