//! `rxu decode`: print RoCEv2 packets from pcap/pcapng captures.
