nv-p2p.o: src/../include/nv-p2p.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/linux/compiler-version.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/linux/kconfig.h \
  /root/.cache/gdrpeer/kernel/f174cea206c9f300/include/generated/autoconf.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/linux/compiler_types.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/linux/compiler-context-analysis.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/linux/compiler_attributes.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/linux/compiler-clang.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/arch/x86/include/asm/percpu_types.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/asm-generic/percpu_types.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/linux/types.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/uapi/linux/types.h \
  /root/.cache/gdrpeer/kernel/f174cea206c9f300/arch/x86/include/generated/uapi/asm/types.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/uapi/asm-generic/types.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/asm-generic/int-ll64.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/uapi/asm-generic/int-ll64.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/arch/x86/include/uapi/asm/bitsperlong.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/asm-generic/bitsperlong.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/uapi/asm-generic/bitsperlong.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/uapi/linux/posix_types.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/linux/stddef.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/uapi/linux/stddef.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/arch/x86/include/asm/posix_types.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/arch/x86/include/uapi/asm/posix_types_64.h \
  /root/.cache/gdrpeer/src/linux-source-7.2/include/uapi/asm-generic/posix_types.h
