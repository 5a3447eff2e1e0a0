# kind's node base image (kind's images/base/Dockerfile, step for step), from what
# hack/kind/build-images.sh stages: a Debian root filesystem made by debootstrap (the
# packages kind's base installs), kind's base files from the sigs.k8s.io/kind module, and
# containerd, runc, crictl and the CNI plugins built from their Go modules.
ARG ROOTFS_IMAGE
FROM ${ROOTFS_IMAGE}
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY bin/containerd bin/ctr bin/containerd-shim-runc-v2 bin/crictl /usr/local/bin/
COPY bin/runc /usr/local/sbin/runc
COPY cni/ /opt/cni/bin/
RUN chmod 0755 /usr/local/bin/* /usr/local/sbin/runc /opt/cni/bin/* /kind /kind/bin /kind/bin/* \
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
       /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
       /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
    && ln -sf /usr/lib/systemd/systemd /sbin/init \
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
    && systemctl mask systemd-binfmt.service \
    && mkdir -p /etc/kubernetes/manifests \
    && ctr oci spec \
       | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
       | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
    && containerd --version && runc --version
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
