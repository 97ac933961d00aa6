//! The packed modex (issue 3): being written.
