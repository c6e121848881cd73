//! The conversation with firewalld over D-Bus: the calls the driver makes, each named as
//! firewalld's API names it, and the mesh's two objects (its policy, and its zone for the
//! private network's interface) made to exist at run time.

use super::forward::ForwardPort;
use crate::dbus::{Arg, Bus, Value};
use crate::error::{Error, Result};

/// The mesh's policy in firewalld: every rich rule in it is the mesh's.
pub const POLICY: &str = "mesh-host";
/// Its priority: the largest firewalld allows, so it runs after every other policy and after
/// the zones' own rules.
const PRIORITY: i32 = 32767;

/// The mesh's zone in firewalld, for the private network's interface (the mesh's own): every
/// rich rule in it, and the interface bound to it, are the mesh's.
pub const ZONE: &str = "mesh-private";

pub(super) const DEST: &str = "org.fedoraproject.FirewallD1";
pub(super) const OBJ: &str = "/org/fedoraproject/FirewallD1";
const CONFIG_OBJ: &str = "/org/fedoraproject/FirewallD1/config";
pub(super) const IFACE: &str = "org.fedoraproject.FirewallD1";
const IFACE_POLICY: &str = "org.fedoraproject.FirewallD1.policy";
const IFACE_ZONE: &str = "org.fedoraproject.FirewallD1.zone";
const IFACE_CONFIG: &str = "org.fedoraproject.FirewallD1.config";
const PROPS: &str = "org.freedesktop.DBus.Properties";
const BUS_DEST: &str = "org.freedesktop.DBus";
const BUS_OBJ: &str = "/org/freedesktop/DBus";

/// One open conversation with firewalld.
pub(super) struct Fw {
    bus: Bus,
}

/// The strings of the first value of a reply, for a method that returns `as`.
fn strs(v: Vec<Value>) -> Vec<String> {
    v.first().and_then(Value::as_strs).unwrap_or_default()
}

impl Fw {
    pub(super) fn open() -> Result<Fw> {
        Ok(Fw {
            bus: Bus::system()?,
        })
    }

    fn call(
        &mut self,
        obj: &str,
        iface: &str,
        member: &str,
        args: &[Arg<'_>],
    ) -> Result<Vec<Value>> {
        self.bus.call(DEST, obj, iface, member, args)
    }

    /// Whether firewalld holds its name on the bus.
    pub(super) fn running(&mut self) -> Result<bool> {
        let r = self.bus.call(
            BUS_DEST,
            BUS_OBJ,
            BUS_DEST,
            "NameHasOwner",
            &[Arg::Str(DEST)],
        )?;
        Ok(r.first().and_then(Value::as_bool).unwrap_or(false))
    }

    /// The process that holds firewalld's name.
    pub(super) fn pid(&mut self) -> Result<u32> {
        let r = self.bus.call(
            BUS_DEST,
            BUS_OBJ,
            BUS_DEST,
            "GetConnectionUnixProcessID",
            &[Arg::Str(DEST)],
        )?;
        match r.first() {
            Some(Value::U32(p)) => Ok(*p),
            _ => Err(Error::Dbus {
                what: "GetConnectionUnixProcessID".into(),
                reason: "no process id in the reply".into(),
            }),
        }
    }

    /// A property of firewalld's configuration (`FirewallBackend`, `CleanupOnExit`, …); `None`
    /// when this firewalld has no such property.
    pub(super) fn config_property(&mut self, name: &str) -> Result<Option<String>> {
        match self.call(
            CONFIG_OBJ,
            PROPS,
            "Get",
            &[Arg::Str(IFACE_CONFIG), Arg::Str(name)],
        ) {
            Ok(v) => Ok(v.first().and_then(Value::as_str).map(String::from)),
            // By the error's name, or by the code that begins its message: firewalld's
            // python-dbus names its own exception and puts the D-Bus error's name
            // (`org.freedesktop.DBus.Error.InvalidArgs`) or firewalld's code
            // (`INVALID_PROPERTY`) first in the message.
            Err(Error::DbusReply { name, message, .. })
                if [
                    name.as_str(),
                    message.split(':').next().unwrap_or("").trim(),
                ]
                .iter()
                .any(|code| code.ends_with(".InvalidArgs") || code.starts_with("INVALID_")) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// firewalld's own state: `RUNNING` once it has loaded its configuration.
    pub(super) fn state(&mut self) -> Result<String> {
        let v = self.call(OBJ, PROPS, "Get", &[Arg::Str(IFACE), Arg::Str("state")])?;
        Ok(v.first().and_then(Value::as_str).unwrap_or("").to_string())
    }

    pub(super) fn runtime_policies(&mut self) -> Result<Vec<String>> {
        Ok(strs(self.call(OBJ, IFACE_POLICY, "getPolicies", &[])?))
    }

    pub(super) fn runtime_zones(&mut self) -> Result<Vec<String>> {
        Ok(strs(self.call(OBJ, IFACE_ZONE, "getZones", &[])?))
    }

    /// Sets the runtime rich rules of the mesh's policy to exactly `rules`: firewalld adds and
    /// removes the difference, and touches nothing else of the policy.
    pub(super) fn set_policy_rules(&mut self, rules: &[&str]) -> Result<()> {
        self.call(
            OBJ,
            IFACE_POLICY,
            "setPolicySettings",
            &[
                Arg::Str(POLICY),
                Arg::Dict(vec![("rich_rules", Arg::Strs(rules.to_vec()))]),
            ],
        )
        .map(|_| ())
    }

    /// The rich rules and the forward ports of the mesh's policy at run time, read together:
    /// firewalld hands out a policy's settings as a whole.
    pub(super) fn policy_settings(&mut self) -> Result<(Vec<String>, Vec<ForwardPort>)> {
        let v = self.call(OBJ, IFACE_POLICY, "getPolicySettings", &[Arg::Str(POLICY)])?;
        let settings = v.first();
        let rules = settings
            .and_then(|s| s.get("rich_rules"))
            .and_then(Value::as_strs)
            .unwrap_or_default();
        let mut items = match settings.and_then(|s| s.get("forward_ports")) {
            Some(Value::Variant(inner)) => match &**inner {
                Value::Array(items) => items.clone(),
                _ => Vec::new(),
            },
            Some(Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        };
        let ports = items
            .drain(..)
            .filter_map(|q| match q {
                Value::Struct(f) if f.len() == 4 => {
                    let s = |i: usize| f[i].as_str().unwrap_or("").to_string();
                    Some(ForwardPort {
                        port: s(0),
                        proto: s(1),
                        toport: s(2),
                        toaddr: s(3),
                    })
                }
                _ => None,
            })
            .collect();
        Ok((rules, ports))
    }

    /// Sets the runtime forward ports of the mesh's policy to exactly `ports`, as
    /// [`Fw::set_policy_rules`] sets its rich rules.
    pub(super) fn set_policy_forward_ports(&mut self, ports: &[ForwardPort]) -> Result<()> {
        self.call(
            OBJ,
            IFACE_POLICY,
            "setPolicySettings",
            &[
                Arg::Str(POLICY),
                Arg::Dict(vec![(
                    "forward_ports",
                    Arg::StrQuads(ports.iter().map(ForwardPort::quad).collect()),
                )]),
            ],
        )
        .map(|_| ())
    }

    /// The rich rules of the mesh's zone at run time.
    pub(super) fn zone_rules(&mut self) -> Result<Vec<String>> {
        Ok(strs(self.call(
            OBJ,
            IFACE_ZONE,
            "getRichRules",
            &[Arg::Str(ZONE)],
        )?))
    }

    pub(super) fn add_zone_rule(&mut self, rule: &str) -> Result<()> {
        self.call(
            OBJ,
            IFACE_ZONE,
            "addRichRule",
            &[Arg::Str(ZONE), Arg::Str(rule), Arg::I32(0)],
        )
        .map(|_| ())
    }

    pub(super) fn remove_zone_rule(&mut self, rule: &str) -> Result<()> {
        self.call(
            OBJ,
            IFACE_ZONE,
            "removeRichRule",
            &[Arg::Str(ZONE), Arg::Str(rule)],
        )
        .map(|_| ())
    }

    /// The zone an interface is bound to at run time; empty when none is (it then falls in the
    /// default zone).
    pub(super) fn zone_of_interface(&mut self, interface: &str) -> Result<String> {
        let v = self.call(
            OBJ,
            IFACE_ZONE,
            "getZoneOfInterface",
            &[Arg::Str(interface)],
        )?;
        Ok(v.first().and_then(Value::as_str).unwrap_or("").to_string())
    }

    /// Binds an interface to the mesh's zone at run time.
    pub(super) fn bind_interface(&mut self, interface: &str) -> Result<()> {
        self.call(
            OBJ,
            IFACE_ZONE,
            "changeZoneOfInterface",
            &[Arg::Str(ZONE), Arg::Str(interface)],
        )
        .map(|_| ())
    }

    /// The interfaces bound to the mesh's zone at run time.
    pub(super) fn zone_interfaces(&mut self) -> Result<Vec<String>> {
        Ok(strs(self.call(
            OBJ,
            IFACE_ZONE,
            "getInterfaces",
            &[Arg::Str(ZONE)],
        )?))
    }

    /// Unbinds an interface from the mesh's zone (back to the default zone).
    pub(super) fn unbind_interface(&mut self, interface: &str) -> Result<()> {
        self.call(
            OBJ,
            IFACE_ZONE,
            "removeInterface",
            &[Arg::Str(ZONE), Arg::Str(interface)],
        )
        .map(|_| ())
    }

    /// Makes the mesh's policy (and, with `zone`, its zone) exist at run time: each added to the
    /// permanent configuration when it is not there (the only files the host writes in
    /// firewalld's configuration, empty of rules), then firewalld reloaded once so the runtime
    /// has them. Nothing is written or reloaded when they are there already.
    pub(super) fn ensure_objects(&mut self, zone: bool) -> Result<()> {
        let policy_here = self.runtime_policies()?.iter().any(|p| p == POLICY);
        let zone_here = !zone || self.runtime_zones()?.iter().any(|z| z == ZONE);
        if policy_here && zone_here {
            return Ok(());
        }
        let known = strs(self.call(CONFIG_OBJ, IFACE_CONFIG, "getPolicyNames", &[])?);
        if !known.iter().any(|p| p == POLICY) {
            self.call(
                CONFIG_OBJ,
                IFACE_CONFIG,
                "addPolicy",
                &[
                    Arg::Str(POLICY),
                    Arg::Dict(vec![
                        (
                            "description",
                            Arg::Str("mesh-host's openings: its rich rules and forward ports are added at run time by mesh-host and only by it"),
                        ),
                        ("target", Arg::Str("CONTINUE")),
                        ("priority", Arg::I32(PRIORITY)),
                        ("ingress_zones", Arg::Strs(vec!["ANY"])),
                        ("egress_zones", Arg::Strs(vec!["HOST"])),
                    ]),
                ],
            )?;
        }
        if zone {
            let known = strs(self.call(CONFIG_OBJ, IFACE_CONFIG, "getZoneNames", &[])?);
            if !known.iter().any(|z| z == ZONE) {
                self.call(
                    CONFIG_OBJ,
                    IFACE_CONFIG,
                    "addZone2",
                    &[
                        Arg::Str(ZONE),
                        Arg::Dict(vec![
                            (
                                "description",
                                Arg::Str("mesh-host's private network: its interface and rich rules are added at run time by mesh-host and only by it"),
                            ),
                            ("target", Arg::Str("default")),
                        ]),
                    ],
                )?;
            }
        }
        self.call(OBJ, IFACE, "reload", &[])?;
        let policy_here = self.runtime_policies()?.iter().any(|p| p == POLICY);
        let zone_here = !zone || self.runtime_zones()?.iter().any(|z| z == ZONE);
        if !(policy_here && zone_here) {
            return Err(Error::Dbus {
                what: format!("firewalld policy {POLICY} and zone {ZONE}"),
                reason: "still not in the runtime configuration after a reload".into(),
            });
        }
        Ok(())
    }
}
