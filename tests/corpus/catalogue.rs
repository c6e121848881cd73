//! The corpus of found firewalls: each entry names its files under
//! `tests/fixtures/found/corpus/` and how its distribution or tool loads them (the fixtures'
//! README says where each came from).

/// One way a fixture's file reaches the node's kernel, as its distribution or tool does it.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// `nft -f FILE`.
    Nft(&'static str),
    /// `nft -f FILE` for a file that includes `@ETC@/nftables.d/*.nft`: the folder `dropins` is
    /// laid out as that `nftables.d` first (Alpine's `/etc/nftables.nft` and its drop-ins).
    NftWithDropins {
        file: &'static str,
        dropins: &'static str,
    },
    /// `PROGRAM FILE` for an `*-restore` program (`iptables-nft-restore`, ...); `noflush` as a
    /// tool that adds its chains to what is there restores them.
    Restore {
        program: &'static str,
        file: &'static str,
        noflush: bool,
    },
    /// `sh FILE` inside the node.
    Script(&'static str),
    /// Debian's fail2ban-server run in the node with the jail file FILE as its `jail.local`, and
    /// the banned source banned with `fail2ban-client set lab-web banip`.
    Fail2ban(&'static str),
    /// Debian's dockerd 20.10 started in the node, and one container run with the `docker run`
    /// options listed in FILE (one a line) serving on its port 80.
    Docker(&'static str),
    /// Debian's firewalld started in the node on a bus of its own (lab::Firewalld), its default
    /// zone `public` being FILE; the host runs with that bus.
    Firewalld(&'static str),
    /// ufw with the lab's copies of its files (lab::Ufw), configured by the ufw commands listed
    /// in FILE (one a line); the host runs in ufw's mount namespace.
    Ufw(&'static str),
}

/// One found firewall of the corpus.
#[derive(Debug, Clone, Copy)]
pub struct Fixture {
    /// The name the table shows.
    pub name: &'static str,
    /// How it is loaded, in order.
    pub steps: &'static [Step],
    /// Whether the ruleset rate-limits a refusal, so one connection proves nothing: the opening
    /// from anywhere is probed many times from outside.
    pub burst: bool,
    /// A match the evaluator does not read here, so the verdict is `doubtful` by design, with
    /// why: such a cell reported doubtful is a known gap, listed under the table and not counted
    /// as agreeing; the ban and the routed checks hold for it as for every other.
    pub undecided: Option<&'static str>,
}

impl Fixture {
    /// Whether a container runtime publishes a port on this machine, so a forwarded opening is
    /// declared and probed too.
    pub fn has_runtime(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::Docker(_)))
    }

    /// Whether the fixture bans the corpus's banned source (a file names it, or fail2ban bans
    /// it): then a banned source refused before the apply must stay refused after it.
    pub fn bans(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::Fail2ban(_)))
            || self.files().iter().any(|f| {
                let path = super::load::corpus_dir().join(f);
                std::fs::read_to_string(&path).is_ok_and(|t| t.contains("@BANNED"))
            })
    }

    /// Whether the ruleset limits each source's new connections through a dynamic set (a rate or
    /// `ct count`): then a burst from outside after the apply must be cut short.
    pub fn limits_per_source(&self) -> bool {
        self.files().iter().any(|f| {
            let path = super::load::corpus_dir().join(f);
            std::fs::read_to_string(&path).is_ok_and(|t| {
                t.lines().any(|l| {
                    l.contains(" add @")
                        && (l.contains("limit rate over") || l.contains("ct count over"))
                })
            })
        })
    }

    /// Every file of the corpus this fixture reads (for the check that each exists).
    pub fn files(&self) -> Vec<&'static str> {
        self.steps
            .iter()
            .map(|s| match *s {
                Step::Nft(f)
                | Step::Restore { file: f, .. }
                | Step::Script(f)
                | Step::Fail2ban(f)
                | Step::Docker(f)
                | Step::Firewalld(f)
                | Step::Ufw(f) => f,
                Step::NftWithDropins { file, .. } => file,
            })
            .collect()
    }
}

macro_rules! nft_fixture {
    ($name:literal, $file:literal) => {
        Fixture {
            name: $name,
            steps: &[Step::Nft($file)],
            burst: false,
            undecided: None,
        }
    };
}

macro_rules! script_fixture {
    ($name:literal, $file:literal) => {
        Fixture {
            name: $name,
            steps: &[Step::Script($file)],
            burst: false,
            undecided: None,
        }
    };
}

/// The corpus, slowest first (the Docker engine's start), so workers overlap it with the rest.
pub const CORPUS: &[Fixture] = &[
    Fixture {
        name: "docker 20.10 (real dockerd)",
        steps: &[Step::Docker("docker-20.10.run")],
        burst: false,
        undecided: None,
    },
    Fixture {
        name: "docker 20.10 on arch stock",
        steps: &[
            Step::Nft("arch-nftables.conf"),
            Step::Docker("docker-20.10.run"),
        ],
        burst: true,
        undecided: None,
    },
    Fixture {
        name: "fail2ban nftables on arch",
        steps: &[
            Step::Nft("arch-nftables.conf"),
            Step::Fail2ban("fail2ban-nftables.jail.local"),
        ],
        burst: true,
        undecided: None,
    },
    Fixture {
        name: "fail2ban iptables-multiport",
        steps: &[
            Step::Restore {
                program: "iptables-nft-restore",
                file: "arch-wiki-simple-stateful.rules",
                noflush: false,
            },
            Step::Restore {
                program: "ip6tables-nft-restore",
                file: "arch-wiki-simple-stateful.ip6.rules",
                noflush: false,
            },
            Step::Fail2ban("fail2ban-iptables-multiport.jail.local"),
        ],
        burst: false,
        undecided: None,
    },
    Fixture {
        name: "firewalld default zone",
        steps: &[Step::Firewalld("firewalld-public.xml")],
        burst: false,
        undecided: None,
    },
    Fixture {
        name: "ubuntu ufw defaults",
        steps: &[Step::Ufw("ufw-defaults.commands")],
        burst: false,
        undecided: None,
    },
    nft_fixture!("debian stock nftables.conf", "debian-nftables.conf"),
    nft_fixture!(
        "debian example workstation",
        "debian-example-workstation.nft"
    ),
    Fixture {
        name: "arch stock nftables.conf",
        steps: &[Step::Nft("arch-nftables.conf")],
        burst: true,
        undecided: None,
    },
    Fixture {
        name: "alpine nftables.nft + .d",
        steps: &[Step::NftWithDropins {
            file: "alpine-nftables.nft",
            dropins: "alpine-nftables.d",
        }],
        burst: false,
        undecided: None,
    },
    Fixture {
        name: "fedora iptables-services",
        steps: &[
            Step::Restore {
                program: "iptables-nft-restore",
                file: "fedora-sysconfig-iptables",
                noflush: false,
            },
            Step::Restore {
                program: "ip6tables-nft-restore",
                file: "fedora-sysconfig-ip6tables",
                noflush: false,
            },
        ],
        burst: false,
        undecided: None,
    },
    Fixture {
        name: "rhel7 iptables-services legacy",
        steps: &[
            Step::Restore {
                program: "iptables-legacy-restore",
                file: "fedora-sysconfig-iptables",
                noflush: false,
            },
            Step::Restore {
                program: "ip6tables-legacy-restore",
                file: "fedora-sysconfig-ip6tables",
                noflush: false,
            },
        ],
        burst: false,
        undecided: None,
    },
    nft_fixture!("nftables wiki server", "nftables-wiki-server.nft"),
    nft_fixture!("nftables wiki workstation", "nftables-wiki-workstation.nft"),
    Fixture {
        name: "arch wiki simple stateful",
        steps: &[
            Step::Restore {
                program: "iptables-nft-restore",
                file: "arch-wiki-simple-stateful.rules",
                noflush: false,
            },
            Step::Restore {
                program: "ip6tables-nft-restore",
                file: "arch-wiki-simple-stateful.ip6.rules",
                noflush: false,
            },
        ],
        burst: false,
        undecided: None,
    },
    nft_fixture!("crowdsec bouncer sets", "crowdsec-firewall-bouncer.nft"),
    script_fixture!("libvirt default network", "libvirt-default-network.sh"),
    Fixture {
        name: "tailscale ts-input/forward",
        steps: &[
            Step::Restore {
                program: "iptables-nft-restore",
                file: "tailscale.rules",
                noflush: true,
            },
            Step::Restore {
                program: "ip6tables-nft-restore",
                file: "tailscale.ip6.rules",
                noflush: true,
            },
        ],
        burst: false,
        undecided: None,
    },
    Fixture {
        name: "kube-proxy iptables mode",
        steps: &[Step::Restore {
            program: "iptables-nft-restore",
            file: "kube-proxy-iptables.rules",
            noflush: true,
        }],
        burst: false,
        undecided: None,
    },
    nft_fixture!("docker 29 nftables backend", "docker-29-nftables.nft"),
    nft_fixture!("adv: iifname eth0 jump wan", "adv-iifname-jump-wan.nft"),
    nft_fixture!("adv: dport != 22 != 8080", "adv-dport-not-not.nft"),
    nft_fixture!("adv: dport != {22, 8080}", "adv-dport-not-set.nft"),
    nft_fixture!("adv: dport 9000-9010 drop", "adv-dport-range.nft"),
    nft_fixture!("adv: tcp flags syn / syn,ack", "adv-tcp-flags-syn.nft"),
    script_fixture!("adv: xt ! --dport 22 REJECT", "adv-xt-not-dport.sh"),
    script_fixture!("adv: xt multiport ! --dports", "adv-xt-multiport-not.sh"),
    script_fixture!("adv: xt --syn DROP", "adv-xt-syn-drop.sh"),
    script_fixture!("adv: xt -i eth0 -j WAN", "adv-xt-iface-jump.sh"),
    nft_fixture!("adv: ban net jump wan", "adv-ban-chain.nft"),
    nft_fixture!("adv: mark set, mark drop", "adv-mark-prerouting.nft"),
    nft_fixture!("adv: nine jumps deep", "adv-nine-jumps.nft"),
    nft_fixture!("adv: vmap refuses 9000, ban", "adv-vmap-refuse.nft"),
    nft_fixture!("adv: named set refuses 9001", "adv-named-set-refuse.nft"),
    // Issue 30: rulesets no one here built the verdict against.
    nft_fixture!("openwrt fw4 router zones", "openwrt-fw4.nft"),
    nft_fixture!("nixos firewall module", "nixos-firewall.nft"),
    script_fixture!("csf panel defaults", "csf-default.sh"),
    script_fixture!("csf panel, log dropped bans", "csf-drop-ip-logging.sh"),
    Fixture {
        name: "netdev ingress on eth0",
        steps: &[Step::Nft("netdev-ingress.nft")],
        burst: false,
        undecided: Some(
            "the wiki's `tcp flags syn tcp option maxseg size 1-535 drop` tests the MSS the sender offers, which no listing tells: every new TCP connection is doubtful (the opening is still written ahead of the port's refusal, for this machine's addresses only)",
        ),
    },
    nft_fixture!("netdev ingress, refusal only", "netdev-ingress-plain.nft"),
    nft_fixture!("kube-proxy nftables mode", "kube-proxy-nftables.nft"),
    Fixture {
        name: "proxmox pve-firewall ipsets",
        steps: &[Step::Script("proxmox-pvefw.sh")],
        burst: false,
        undecided: None,
    },
    nft_fixture!("flood limits dynset/ct count", "flood-limits.nft"),
    Fixture {
        name: "wg-quick on nftables wiki srv",
        steps: &[
            Step::Nft("nftables-wiki-server.nft"),
            Step::Nft("wg-quick-wg0.nft"),
        ],
        burst: false,
        undecided: None,
    },
    Fixture {
        name: "incus on debian workstation",
        steps: &[
            Step::Nft("debian-example-workstation.nft"),
            Step::Nft("incus-bridge.nft"),
        ],
        burst: false,
        undecided: None,
    },
    Fixture {
        name: "sshguard on debian stock",
        steps: &[Step::Nft("debian-nftables.conf"), Step::Nft("sshguard.nft")],
        burst: false,
        undecided: None,
    },
];
