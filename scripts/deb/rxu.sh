# shellcheck shell=sh
# /etc/profile.d/rxu.sh: what a verbs program in a login shell needs to see
# the devices rxu@<netdev>.service brought up, from /etc/rxu/rxu.env (the
# file the unit reads). Nothing changes while no device is up, so kernel
# RDMA devices stay visible then (SYSFS_PATH would replace /sys for them).
if [ -r /etc/rxu/rxu.env ]; then
    # Only the four names this file reads (no other variable leaks in).
    rxu_env_line() {
        sed -n "s/^$1=//p" /etc/rxu/rxu.env | tail -n 1 | sed 's/^"\(.*\)"$/\1/'
    }
    rxu_sysfs=$(rxu_env_line SYSFS_PATH)
    rxu_up=
    for rxu_dev in "$rxu_sysfs"/class/infiniband_verbs/uverbs*; do
        [ -n "$rxu_sysfs" ] && [ -e "$rxu_dev" ] && rxu_up=1
        break
    done
    if [ -n "$rxu_up" ]; then
        SYSFS_PATH=$rxu_sysfs
        RXU_RUNTIME_DIR=$(rxu_env_line RXU_RUNTIME_DIR)
        export SYSFS_PATH RXU_RUNTIME_DIR
        rxu_preload=$(rxu_env_line RXU_PRELOAD)
        if [ -n "$rxu_preload" ] && [ -r "$rxu_preload" ]; then
            # Appended: a preload already set (librspreload) must come first.
            case ":${LD_PRELOAD:-}:" in
                *":$rxu_preload:"*) ;;
                *) LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$rxu_preload"; export LD_PRELOAD ;;
            esac
        fi
    fi
    unset -f rxu_env_line
    unset rxu_sysfs rxu_preload rxu_up rxu_dev
fi
