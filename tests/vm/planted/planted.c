// SPDX-License-Identifier: GPL-2.0
/*
 * planted: deliberate kernel bugs, triggered one at a time through debugfs,
 * so that the test rig can prove its kernel-log oracle catches each kind of
 * report. Loaded only by the tests that prove the oracle (the last of
 * check.sh, the first of kcsan.sh); never part of the product.
 *
 *   echo kasan   > /sys/kernel/debug/planted/trigger   out-of-bounds read
 *   echo lockdep > ...                                 AB-BA lock order
 *   echo warning > ...                                 WARN()
 *   echo leak    > ...                                 unreferenced kmalloc
 *   echo race    > ...                                 data race (KCSAN kernel)
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/jiffies.h>
#include <linux/kthread.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/string.h>

#define PLANTED_LEAKS 4
/* Stored addresses are masked so that kmemleak does not take them for pointers. */
#define PLANTED_MASK 0x5a5a5a5a5a5a5a5aUL

static DEFINE_MUTEX(planted_a);
static DEFINE_MUTEX(planted_b);
static struct dentry *planted_dir;
/* The leaked objects' addresses, masked, freed at unload: none is reported later. */
static unsigned long planted_leaked[PLANTED_LEAKS];

static noinline void planted_kasan(void)
{
	char *p = kmalloc(16, GFP_KERNEL);

	if (!p)
		return;
	pr_info("reading one byte past a 16-byte object\n");
	/* READ_ONCE keeps the compiler from dropping the bad read. */
	pr_info("byte 16 is %d\n", READ_ONCE(p[16]));
	kfree(p);
}

static void planted_lockdep(void)
{
	/* Each order alone is fine; both orders are a deadlock waiting to happen. */
	mutex_lock(&planted_a);
	mutex_lock(&planted_b);
	mutex_unlock(&planted_b);
	mutex_unlock(&planted_a);

	mutex_lock(&planted_b);
	mutex_lock(&planted_a);
	mutex_unlock(&planted_a);
	mutex_unlock(&planted_b);
}

/*
 * Four objects of 16 to 128 KiB. Small objects are often kept "referenced"
 * by stale copies of their address, so kmemleak reliably reports only
 * larger ones, and only on the second scan (the first records a checksum).
 * Even those are sometimes kept by a stale copy for minutes: the test wants
 * one report at least, and unloading frees them all, so that one reported
 * late does not appear outside the test's region.
 */
static noinline void planted_leak(void)
{
	int i;

	for (i = 0; i < PLANTED_LEAKS; i++) {
		void *p;

		if (planted_leaked[i])
			continue;
		p = kmalloc(SZ_16K << i, GFP_KERNEL);
		if (p)
			memset(p, 0x5a, SZ_16K << i);
		OPTIMIZER_HIDE_VAR(p);
		planted_leaked[i] = (unsigned long)p ^ PLANTED_MASK;
	}
	pr_info("leaked %d objects of 16 KiB to 128 KiB\n", PLANTED_LEAKS);
}

static void planted_unleak(void)
{
	int i;

	for (i = 0; i < PLANTED_LEAKS; i++) {
		if (planted_leaked[i])
			kfree((void *)(planted_leaked[i] ^ PLANTED_MASK));
		planted_leaked[i] = 0;
	}
}

/*
 * A plain counter that a kthread increments while the writer of "race" reads
 * it, both without a lock or a marked access, for a second: KCSAN samples
 * accesses, and a second of racing gives it thousands of chances.
 */
static unsigned long planted_counter;

static noinline int planted_race_writer(void *unused)
{
	while (!kthread_should_stop()) {
		planted_counter++;
		cond_resched();
	}
	return 0;
}

static noinline void planted_race(void)
{
	unsigned long end = jiffies + HZ, seen = 0;
	struct task_struct *writer;

	writer = kthread_run(planted_race_writer, NULL, "planted-race");
	if (IS_ERR(writer))
		return;
	while (time_before(jiffies, end)) {
		seen += planted_counter;
		/* Read the counter again on each pass, not once before the loop. */
		barrier();
		cond_resched();
	}
	kthread_stop(writer);
	pr_info("read a counter racing with its writer (sum %lu)\n", seen);
}

static ssize_t planted_write(struct file *file, const char __user *ubuf,
			     size_t len, loff_t *ppos)
{
	char buf[16];

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	strim(buf);

	if (!strcmp(buf, "kasan"))
		planted_kasan();
	else if (!strcmp(buf, "lockdep"))
		planted_lockdep();
	else if (!strcmp(buf, "warning"))
		WARN(1, "planted warning\n");
	else if (!strcmp(buf, "leak"))
		planted_leak();
	else if (!strcmp(buf, "race"))
		planted_race();
	else
		return -EINVAL;
	return len;
}

static const struct file_operations planted_fops = {
	.owner = THIS_MODULE,
	.write = planted_write,
};

static int __init planted_init(void)
{
	planted_dir = debugfs_create_dir("planted", NULL);
	debugfs_create_file("trigger", 0200, planted_dir, NULL, &planted_fops);
	return 0;
}

static void __exit planted_exit(void)
{
	debugfs_remove_recursive(planted_dir);
	planted_unleak();
}

module_init(planted_init);
module_exit(planted_exit);
MODULE_DESCRIPTION("Deliberate bugs that prove the gdrpeer test rig's log oracle");
MODULE_LICENSE("GPL");
