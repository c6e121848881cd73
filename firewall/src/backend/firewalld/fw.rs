//! The conversation with firewalld over D-Bus (zbus's blocking connection): the calls the
//! driver makes, each named as firewalld's API names it, and the mesh's two objects (its policy,
//! and its zone for the private network's interface) made to exist at run time.

use super::forward::ForwardPort;
use crate::dbus::{self, Connection};
use crate::error::{Error, Result};
use std::collections::HashMap;
use zbus::export::serde::Serialize;
use zbus::zvariant::{DynamicType, OwnedValue, Value};

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
    bus: Connection,
}

/// A settings dictionary (`a{sv}`), as firewalld's settings calls take them.
type Settings<'a> = HashMap<&'a str, Value<'a>>;

impl Fw {
    pub(super) fn open() -> Result<Fw> {
        Ok(Fw {
            bus: dbus::system()?,
        })
    }

    /// Calls `iface.member` on `obj` of `dest` and reads its reply as `T`; an error reply is an
    /// error naming the method and the bus's message.
    fn call_to<B, T>(
        &mut self,
        dest: &str,
        obj: &str,
        iface: &str,
        member: &str,
        body: &B,
    ) -> Result<T>
    where
        B: Serialize + DynamicType,
        T: for<'d> zbus::zvariant::DynamicDeserialize<'d>,
    {
        let reply = self
            .bus
            .call_method(Some(dest), obj, Some(iface), member, body)
            .map_err(|e| dbus::call_error(iface, member, e))?;
        reply
            .body()
            .deserialize::<T>()
            .map_err(|e| dbus::call_error(iface, member, e))
    }

    /// A call to firewalld whose reply is `T`.
    fn call<B, T>(&mut self, obj: &str, iface: &str, member: &str, body: &B) -> Result<T>
    where
        B: Serialize + DynamicType,
        T: for<'d> zbus::zvariant::DynamicDeserialize<'d>,
    {
        self.call_to(DEST, obj, iface, member, body)
    }

    /// A call to firewalld whose reply (none, or the name or path of what it changed) is not
    /// needed.
    fn send<B>(&mut self, obj: &str, iface: &str, member: &str, body: &B) -> Result<()>
    where
        B: Serialize + DynamicType,
    {
        self.bus
            .call_method(Some(DEST), obj, Some(iface), member, body)
            .map(drop)
            .map_err(|e| dbus::call_error(iface, member, e))
    }

    /// Whether firewalld holds its name on the bus.
    pub(super) fn running(&mut self) -> Result<bool> {
        self.call_to(BUS_DEST, BUS_OBJ, BUS_DEST, "NameHasOwner", &(DEST,))
    }

    /// The process that holds firewalld's name.
    pub(super) fn pid(&mut self) -> Result<u32> {
        self.call_to(
            BUS_DEST,
            BUS_OBJ,
            BUS_DEST,
            "GetConnectionUnixProcessID",
            &(DEST,),
        )
    }

    /// A property of firewalld's configuration (`FirewallBackend`, `CleanupOnExit`, …); `None`
    /// when this firewalld has no such property.
    pub(super) fn config_property(&mut self, name: &str) -> Result<Option<String>> {
        match self.call::<_, OwnedValue>(CONFIG_OBJ, PROPS, "Get", &(IFACE_CONFIG, name)) {
            Ok(v) => Ok(String::try_from(v).ok()),
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
        let v: OwnedValue = self.call(OBJ, PROPS, "Get", &(IFACE, "state"))?;
        Ok(String::try_from(v).unwrap_or_default())
    }

    pub(super) fn runtime_policies(&mut self) -> Result<Vec<String>> {
        self.call(OBJ, IFACE_POLICY, "getPolicies", &())
    }

    pub(super) fn runtime_zones(&mut self) -> Result<Vec<String>> {
        self.call(OBJ, IFACE_ZONE, "getZones", &())
    }

    /// Sets the runtime rich rules of the mesh's policy to exactly `rules`: firewalld adds and
    /// removes the difference, and touches nothing else of the policy.
    pub(super) fn set_policy_rules(&mut self, rules: &[&str]) -> Result<()> {
        let settings = Settings::from([("rich_rules", Value::from(rules.to_vec()))]);
        self.send(OBJ, IFACE_POLICY, "setPolicySettings", &(POLICY, settings))
    }

    /// The rich rules and the forward ports of the mesh's policy at run time, read together:
    /// firewalld hands out a policy's settings as a whole.
    pub(super) fn policy_settings(&mut self) -> Result<(Vec<String>, Vec<ForwardPort>)> {
        let mut settings: HashMap<String, OwnedValue> =
            self.call(OBJ, IFACE_POLICY, "getPolicySettings", &(POLICY,))?;
        let rules = settings
            .remove("rich_rules")
            .and_then(|v| Vec::<String>::try_from(v).ok())
            .unwrap_or_default();
        let ports = settings
            .remove("forward_ports")
            .and_then(|v| Vec::<(String, String, String, String)>::try_from(v).ok())
            .unwrap_or_default()
            .into_iter()
            .map(|(port, proto, toport, toaddr)| ForwardPort {
                port,
                proto,
                toport,
                toaddr,
            })
            .collect();
        Ok((rules, ports))
    }

    /// Sets the runtime forward ports of the mesh's policy to exactly `ports`, as
    /// [`Fw::set_policy_rules`] sets its rich rules.
    pub(super) fn set_policy_forward_ports(&mut self, ports: &[ForwardPort]) -> Result<()> {
        let quads: Vec<(&str, &str, &str, &str)> = ports.iter().map(ForwardPort::quad).collect();
        let settings = Settings::from([("forward_ports", Value::from(quads))]);
        self.send(OBJ, IFACE_POLICY, "setPolicySettings", &(POLICY, settings))
    }

    /// The rich rules of the mesh's zone at run time.
    pub(super) fn zone_rules(&mut self) -> Result<Vec<String>> {
        self.call(OBJ, IFACE_ZONE, "getRichRules", &(ZONE,))
    }

    pub(super) fn add_zone_rule(&mut self, rule: &str) -> Result<()> {
        self.send(OBJ, IFACE_ZONE, "addRichRule", &(ZONE, rule, 0i32))
    }

    pub(super) fn remove_zone_rule(&mut self, rule: &str) -> Result<()> {
        self.send(OBJ, IFACE_ZONE, "removeRichRule", &(ZONE, rule))
    }

    /// The zone an interface is bound to at run time; empty when none is (it then falls in the
    /// default zone).
    pub(super) fn zone_of_interface(&mut self, interface: &str) -> Result<String> {
        self.call(OBJ, IFACE_ZONE, "getZoneOfInterface", &(interface,))
    }

    /// Binds an interface to the mesh's zone at run time.
    pub(super) fn bind_interface(&mut self, interface: &str) -> Result<()> {
        self.send(OBJ, IFACE_ZONE, "changeZoneOfInterface", &(ZONE, interface))
    }

    /// The interfaces bound to the mesh's zone at run time.
    pub(super) fn zone_interfaces(&mut self) -> Result<Vec<String>> {
        self.call(OBJ, IFACE_ZONE, "getInterfaces", &(ZONE,))
    }

    /// Unbinds an interface from the mesh's zone (back to the default zone).
    pub(super) fn unbind_interface(&mut self, interface: &str) -> Result<()> {
        self.send(OBJ, IFACE_ZONE, "removeInterface", &(ZONE, interface))
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
        let known: Vec<String> = self.call(CONFIG_OBJ, IFACE_CONFIG, "getPolicyNames", &())?;
        if !known.iter().any(|p| p == POLICY) {
            let settings = Settings::from([
                (
                    "description",
                    Value::from("mesh-host's openings: its rich rules and forward ports are added at run time by mesh-host and only by it"),
                ),
                ("target", Value::from("CONTINUE")),
                ("priority", Value::from(PRIORITY)),
                ("ingress_zones", Value::from(vec!["ANY"])),
                ("egress_zones", Value::from(vec!["HOST"])),
            ]);
            self.send(CONFIG_OBJ, IFACE_CONFIG, "addPolicy", &(POLICY, settings))?;
        }
        if zone {
            let known: Vec<String> = self.call(CONFIG_OBJ, IFACE_CONFIG, "getZoneNames", &())?;
            if !known.iter().any(|z| z == ZONE) {
                let settings = Settings::from([
                    (
                        "description",
                        Value::from("mesh-host's private network: its interface and rich rules are added at run time by mesh-host and only by it"),
                    ),
                    ("target", Value::from("default")),
                ]);
                self.send(CONFIG_OBJ, IFACE_CONFIG, "addZone2", &(ZONE, settings))?;
            }
        }
        self.send(OBJ, IFACE, "reload", &())?;
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
