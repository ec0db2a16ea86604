//! The device node: the sysfs-like tree and /dev/infiniband/uverbsN that libibverbs reads.
