//! Typing the keys of a written step that together are one value: the container keys
//! into a [`Container`] (only beside `image:`, and never on a `get:` or `put:`), and
//! `across:` with its dials into an [`Across`]. A key that cannot be part of its value is
//! a located load error here, so nothing after loading checks the combination again.

use super::at::Pos;
use super::container::Container;
use super::flow_keys::Across;
use super::raw_step::RawStep;
use super::typing::Typer;

impl Typer<'_> {
    /// The step's container, taken out of `raw` (a step of kind `key` at `pos`).
    pub(super) fn container(&mut self, raw: &mut RawStep, key: &str) -> Option<Container> {
        let (image, privileged, user, limits) = (
            raw.image.take(),
            raw.privileged.take(),
            raw.user.take(),
            raw.container_limits.take(),
        );
        let written = [
            ("image", image.as_ref().map(|i| i.pos)),
            ("privileged", privileged.as_ref().map(|p| p.pos)),
            ("user", user.as_ref().map(|u| u.pos)),
            ("container_limits", limits.as_ref().map(|c| c.pos)),
        ];
        let written = written.into_iter().filter_map(|(k, pos)| Some((k, pos?)));
        if key == "get" || key == "put" {
            for (k, pos) in written {
                self.push(
                    pos,
                    format!("`{k}` does not belong on a `get`/`put` step"),
                    "a resource's commands run on this machine; set it on a task or agent step"
                        .to_owned(),
                );
            }
            return None;
        }
        let Some(image) = image else {
            for (k, pos) in written {
                let fix = super::check_container::needs_image_fix(k);
                self.push(pos, format!("`{k}` needs `image:`"), fix);
            }
            return None;
        };
        Some(Container {
            image,
            privileged,
            user,
            limits,
        })
    }

    /// The step's `across:` with its dials, taken out of `raw` (a step at `pos`).
    pub(super) fn across(&mut self, raw: &mut RawStep, pos: Pos) -> Option<Across> {
        let (max_in_flight, fail_fast) = (raw.max_in_flight.take(), raw.fail_fast.take());
        let Some(axes) = raw.across.take() else {
            let dials = [
                ("max_in_flight", max_in_flight.map(|m| m.pos)),
                ("fail_fast", fail_fast.map(|_| pos)),
            ];
            for (key, at) in dials {
                if let Some(at) = at {
                    self.push(
                        at,
                        format!("`{key}` only works with `across:`"),
                        format!("remove `{key}`, or add `across:` (for `in_parallel:` write it inside the block)"),
                    );
                }
            }
            return None;
        };
        Some(Across {
            axes,
            max_in_flight,
            fail_fast: fail_fast.unwrap_or(false),
        })
    }
}
