/* Preloaded by benchmarks/avx2_only.py: the process sees a CPU with AVX2 and FMA but no AVX-512,
 * AVX-VNNI, AVX512-VNNI, AVX512-BF16 or AMX, so that every library (MKL, OpenBLAS, oneDNN, ONNX
 * Runtime's MLAS, LLVM's host detection) picks the kernels it runs on such a processor (AMD Zen 2
 * and Zen 3, Intel before Skylake-SP).
 *
 * Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID, the "cpuid_fault" flag) turns each CPUID
 * instruction into a SIGSEGV; the handler executes the real instruction with faulting off, clears
 * the feature bits below and resumes after it. The setting is inherited by every thread the
 * process starts; a SIGSEGV that is not a CPUID instruction takes the default action. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define BIT(n) (1u << (n))

static long cpuid_faulting(int off) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, off); }

static void mask(unsigned leaf, unsigned sub, unsigned *a, unsigned *b, unsigned *c, unsigned *d) {
    if (leaf == 7 && sub == 0) {
        /* EBX: AVX512 F, DQ, IFMA, PF, ER, CD, BW, VL */
        *b &= ~(BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31));
        /* ECX: AVX512 VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ */
        *c &= ~(BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14));
        /* EDX: AVX512 4VNNIW, 4FMAPS, VP2INTERSECT; AMX-BF16, AVX512-FP16, AMX-TILE, AMX-INT8 */
        *d &= ~(BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25));
    } else if (leaf == 7 && sub == 1) {
        /* EAX: AVX-VNNI, AVX512-BF16, AMX-FP16, AVX-IFMA; EDX: AVX-VNNI-INT8, AVX-NE-CONVERT,
         * AMX-COMPLEX, AVX10 */
        *a &= ~(BIT(4) | BIT(5) | BIT(21) | BIT(23));
        *d &= ~(BIT(4) | BIT(5) | BIT(8) | BIT(19));
    } else if (leaf == 0xd && sub == 0) {
        /* the register state the OS may enable: opmask, ZMM_Hi256, Hi16_ZMM, AMX tiles */
        *a &= ~(BIT(5) | BIT(6) | BIT(7) | BIT(17) | BIT(18));
    } else if (leaf == 0x1d || leaf == 0x1e || leaf == 0x24) {
        *a = *b = *c = *d = 0; /* AMX tile and AVX10 leaves */
    }
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    greg_t *r = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    if (ip[0] != 0x0f || ip[1] != 0xa2) { /* not CPUID: a real fault */
        signal(SIGSEGV, SIG_DFL);
        return;
    }
    unsigned leaf = (unsigned)r[REG_RAX], sub = (unsigned)r[REG_RCX], a, b, c, d;
    cpuid_faulting(1);
    __cpuid_count(leaf, sub, a, b, c, d);
    cpuid_faulting(0);
    mask(leaf, sub, &a, &b, &c, &d);
    r[REG_RAX] = a;
    r[REG_RBX] = b;
    r[REG_RCX] = c;
    r[REG_RDX] = d;
    r[REG_RIP] += 2;
}

__attribute__((constructor)) static void start(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &action, NULL);
    if (cpuid_faulting(0) != 0) {
        static const char message[] = "cpuid_mask: this kernel or CPU has no CPUID faulting\n";
        (void)!write(2, message, sizeof message - 1);
        _exit(2);
    }
}
