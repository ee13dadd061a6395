// SPDX-License-Identifier: GPL-2.0
/*
 * p2pclient: a minimal nv-p2p client for nvsim's own tests.
 *
 * It calls the nv-p2p functions exactly as asked, in the context of the
 * process that asks (or of a kthread), so the tests can check each behaviour
 * of the NVIDIA side directly, without gdrpeer in between. A test opens
 * /sys/kernel/debug/p2pclient/cmd, writes one command and reads the result
 * back from the same open file:
 *
 *   get VA LEN [TOKEN VASPACE]   pin with a free callback  -> "ok H <table>" | "err E"
 *   get_nocb VA LEN              pin with a NULL callback
 *   get_nodata VA LEN            pin with NULL callback data (its callback counts in nodata)
 *   get_locked VA LEN            pin under client_lock, callback takes client_lock
 *   get_putcb VA LEN             pin whose callback calls put_pages (result in cbinfo)
 *   getp VA LEN [FLAGS]          persistent pin (FLAGS: of get_pages_persistent)
 *   kget VA LEN                  pin from a kthread
 *   put H | putp H [FLAGS]       unpin (the return value only; putp's flags 0 by default)
 *   put_at H VA                  put_pages naming VA instead of the pinned address
 *   map H gpu|edu                DMA-map for a peer -> "ok M <addresses>"
 *   unmap H M gpu|edu            DMA-unmap
 *   map_stale H gpu|edu          DMA-map even after the callback (a client bug)
 *   unmap_stale H M gpu|edu      DMA-unmap even after the callback (a client bug)
 *   unmap_atomic H M gpu|edu     DMA-unmap under a spinlock (a client bug)
 *   state H                      "revoked=0|1 cb_pid=PID"
 *   cbinfo H                     "kthread=0|1 ret=R": the callback's context and the
 *                                result of its put_pages (get_putcb)
 *   read H                       reads the table's header even after the callback (a
 *                                client bug: KASAN reports it) -> "version=V entries=N"
 *   same H1 H2                   "table=0|1 uuid=0|1 uuid_bytes=0|1": whether the two
 *                                pins share a table, a UUID allocation, UUID bytes
 *   nodata                       "fired=N": callbacks with NULL data so far
 *
 * Handles live until the module is unloaded: a put from the wrong process
 * returns 0 without releasing anything, so the callback may still come.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/completion.h>
#include <linux/debugfs.h>
#include <linux/kthread.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/xarray.h>
#include <nv-p2p.h>

#define P2PCLIENT_MAX_MAPS 4
#define P2PCLIENT_RESULT 4096
#define P2PCLIENT_UUID_LEN 16		/* bytes a table's gpu_uuid points to */

struct p2pclient_pin {
	struct nvidia_p2p_page_table *pt;
	u64 va;
	bool persistent;
	u32 flags;			/* of a persistent pin */
	bool released;			/* a persistent pin given back (putp) */
	bool takes_lock;		/* the deliberate AB-BA: see get_locked */
	bool puts_in_callback;		/* get_putcb */
	atomic_t revoked;
	atomic_t readers;		/* reading the table or a mapping: the callback waits */
	wait_queue_head_t idle;		/* readers dropped to 0 */
	pid_t cb_pid;
	bool cb_kthread;		/* the callback ran in a kernel thread */
	int cb_ret;			/* put_pages in the callback (get_putcb) */
	struct nvidia_p2p_dma_mapping *maps[P2PCLIENT_MAX_MAPS];
};

/* Callbacks of pins made with NULL data (get_nodata). */
static atomic_t nodata_fired = ATOMIC_INIT(0);

/*
 * Serialises commands (but unpins); deliberately taken in the callback only by
 * get_locked pins.
 */
static DEFINE_MUTEX(client_lock);
static DEFINE_XARRAY_ALLOC1(client_pins);
static struct dentry *client_dir;

/*
 * Reading the table (or a mapping) while the callback may come: the callback
 * marks the pin revoked, then waits for the readers, so that what a reader
 * holds stays valid until it is done (the driver frees it after the callback
 * returns). False: revoked already, nothing may be read.
 */
static bool p2pclient_read_begin(struct p2pclient_pin *pin)
{
	atomic_inc(&pin->readers);
	/* Pairs with the callback's: it sees the reader, or the reader sees revoked. */
	smp_mb__after_atomic();
	if (!atomic_read(&pin->revoked))
		return true;
	if (atomic_dec_and_test(&pin->readers))
		wake_up(&pin->idle);
	return false;
}

static void p2pclient_read_end(struct p2pclient_pin *pin)
{
	if (atomic_dec_and_test(&pin->readers))
		wake_up(&pin->idle);
}

static void p2pclient_free_callback(void *data)
{
	struct p2pclient_pin *pin = data;
	int i;

	atomic_set(&pin->revoked, 1);
	/* Pairs with p2pclient_read_begin(): no reader starts unseen after this. */
	smp_mb();
	wait_event(pin->idle, !atomic_read(&pin->readers));

	if (pin->takes_lock)
		mutex_lock(&client_lock);
	for (i = 0; i < P2PCLIENT_MAX_MAPS; i++)
		if (pin->maps[i])
			nvidia_p2p_free_dma_mapping(pin->maps[i]);
	nvidia_p2p_free_page_table(pin->pt);
	/* A bug on purpose: the driver's lock is held here, put_pages fails. */
	if (pin->puts_in_callback)
		pin->cb_ret = nvidia_p2p_put_pages(0, 0, pin->va, pin->pt);
	pin->cb_pid = task_pid_nr(current);
	pin->cb_kthread = current->flags & PF_KTHREAD;
	if (pin->takes_lock)
		mutex_unlock(&client_lock);
}

/* The callback of a pin made with NULL data: the driver passes the data back as given. */
static void p2pclient_nodata_callback(void *data)
{
	WARN_ON(data);
	atomic_inc(&nodata_fired);
}

static int p2pclient_table_str(struct nvidia_p2p_page_table *pt, char *buf, size_t size)
{
	int n, i;

	n = scnprintf(buf, size, "version=0x%08x page_size=%u entries=%u ",
		      pt->version, pt->page_size, pt->entries);
	if (pt->version >> 16 == 2)
		n += scnprintf(buf + n, size - n, "flags=0x%x ", pt->flags);
	n += scnprintf(buf + n, size - n, "pa=");
	for (i = 0; i < pt->entries; i++)
		n += scnprintf(buf + n, size - n, "%s0x%llx", i ? "," : "",
			       pt->pages[i]->physical_address);
	return n;
}

struct p2pclient_kget {
	struct completion done;
	struct p2pclient_pin *pin;
	u64 len;
	int ret;
};

static int p2pclient_kget_fn(void *data)
{
	struct p2pclient_kget *k = data;

	k->ret = nvidia_p2p_get_pages(0, 0, k->pin->va, k->len, &k->pin->pt,
				      p2pclient_free_callback, k->pin);
	complete(&k->done);
	return 0;
}

static int p2pclient_get(const char *op, u64 va, u64 len, u64 token, u32 va_space,
			 char *out, size_t size)
{
	struct p2pclient_pin *pin = kzalloc_obj(*pin, GFP_KERNEL);
	u32 id;
	int ret;

	if (!pin)
		return -ENOMEM;
	pin->va = va;
	/*
	 * A reader from the start: a callback that comes as soon as the pin
	 * is registered (a free racing it) waits until the table is printed.
	 * Pins with NULL data (get_nodata) have no such guard.
	 */
	init_waitqueue_head(&pin->idle);
	atomic_set(&pin->readers, 1);
	if (!strcmp(op, "get")) {
		ret = nvidia_p2p_get_pages(token, va_space, va, len, &pin->pt,
					   p2pclient_free_callback, pin);
	} else if (!strcmp(op, "get_nocb")) {
		ret = nvidia_p2p_get_pages(0, 0, va, len, &pin->pt, NULL, pin);
	} else if (!strcmp(op, "get_nodata")) {
		ret = nvidia_p2p_get_pages(0, 0, va, len, &pin->pt, p2pclient_nodata_callback,
					   NULL);
	} else if (!strcmp(op, "get_locked")) {
		/* client_lock is held (by the caller) while calling into nvsim. */
		lockdep_assert_held(&client_lock);
		pin->takes_lock = true;
		ret = nvidia_p2p_get_pages(0, 0, va, len, &pin->pt, p2pclient_free_callback, pin);
	} else if (!strcmp(op, "get_putcb")) {
		pin->puts_in_callback = true;
		ret = nvidia_p2p_get_pages(0, 0, va, len, &pin->pt, p2pclient_free_callback, pin);
	} else if (!strcmp(op, "getp")) {
		pin->persistent = true;
		pin->flags = token;	/* getp VA LEN FLAGS */
		ret = nvidia_p2p_get_pages_persistent(va, len, &pin->pt, pin->flags);
	} else {	/* kget */
		struct p2pclient_kget k = { .pin = pin, .len = len };
		struct task_struct *t;

		init_completion(&k.done);
		t = kthread_run(p2pclient_kget_fn, &k, "p2pclient-kget");
		if (IS_ERR(t)) {
			ret = PTR_ERR(t);
		} else {
			wait_for_completion(&k.done);
			ret = k.ret;
		}
	}
	if (ret) {
		kfree(pin);
		return ret;
	}
	ret = xa_alloc(&client_pins, &id, pin, xa_limit_32b, GFP_KERNEL);
	if (ret) {
		/* Cannot track it: give it back at once. */
		if (pin->persistent)
			nvidia_p2p_put_pages_persistent(va, pin->pt, 0);
		else
			nvidia_p2p_put_pages(0, 0, va, pin->pt);
		kfree(pin);
		return ret;
	}
	scnprintf(out, size, "ok %u ", id);
	p2pclient_table_str(pin->pt, out + strlen(out), size - strlen(out));
	p2pclient_read_end(pin);
	return 0;
}

static struct pci_dev *p2pclient_peer(const char *name)
{
	if (!strcmp(name, "gpu"))
		return pci_get_device(0x1af4, 0x1110, NULL);
	if (!strcmp(name, "edu"))
		return pci_get_device(0x1234, 0x11e8, NULL);
	return NULL;
}

static int p2pclient_map(struct p2pclient_pin *pin, const char *peer_name, bool stale,
			 char *out, size_t size)
{
	struct pci_dev *peer = p2pclient_peer(peer_name);
	struct nvidia_p2p_dma_mapping *map;
	int slot, n, i, ret;

	if (!peer)
		return -ENODEV;
	for (slot = 0; slot < P2PCLIENT_MAX_MAPS && pin->maps[slot]; slot++)
		;
	ret = -ENOSPC;
	if (slot == P2PCLIENT_MAX_MAPS || (!stale && atomic_read(&pin->revoked)))
		goto out;
	ret = nvidia_p2p_dma_map_pages(peer, pin->pt, &map);
	if (ret)
		goto out;
	/* Revoked meanwhile: the driver frees the mapping with the table. */
	ret = -ENXIO;
	if (!p2pclient_read_begin(pin))
		goto out;
	pin->maps[slot] = map;
	n = scnprintf(out, size, "ok %d version=0x%08x entries=%u dma=", slot, map->version,
		      map->entries);
	for (i = 0; i < map->entries; i++)
		n += scnprintf(out + n, size - n, "%s0x%llx", i ? "," : "", map->dma_addresses[i]);
	p2pclient_read_end(pin);
	ret = 0;
out:
	pci_dev_put(peer);
	return ret;
}

/* Held around unmap_atomic's call. */
static DEFINE_SPINLOCK(atomic_context);

/* Where: 0 normally, 1 even after the callback, 2 also under a spinlock. */
static int p2pclient_unmap(struct p2pclient_pin *pin, int slot, const char *peer_name,
			   int where)
{
	struct pci_dev *peer = p2pclient_peer(peer_name);
	int ret = -EINVAL;

	if (!peer)
		return -ENODEV;
	if (slot >= 0 && slot < P2PCLIENT_MAX_MAPS && pin->maps[slot] &&
	    (where || !atomic_read(&pin->revoked))) {
		if (where == 2)
			spin_lock(&atomic_context);
		ret = nvidia_p2p_dma_unmap_pages(peer, pin->pt, pin->maps[slot]);
		if (where == 2)
			spin_unlock(&atomic_context);
		if (!ret)
			pin->maps[slot] = NULL;
	}
	pci_dev_put(peer);
	return ret;
}

/* Whether pins @a and @b share a table, a UUID allocation, the UUID's bytes. */
/*
 * "read H": the table's header. A bug on purpose when the callback has run:
 * the table is freed memory. A function of its own, which the rig's oracle
 * names as the place of the planted KASAN report.
 */
static noinline int p2pclient_read_table(struct p2pclient_pin *pin, char *out, size_t size)
{
	scnprintf(out, size, "version=0x%08x entries=%u", READ_ONCE(pin->pt->version),
		  READ_ONCE(pin->pt->entries));
	return 0;
}

static int p2pclient_same(struct p2pclient_pin *a, struct p2pclient_pin *b, char *out,
			  size_t size)
{
	if (!p2pclient_read_begin(a))
		return -ENXIO;
	if (!p2pclient_read_begin(b)) {
		p2pclient_read_end(a);
		return -ENXIO;
	}
	scnprintf(out, size, "table=%d uuid=%d uuid_bytes=%d", a->pt == b->pt,
		  a->pt->gpu_uuid == b->pt->gpu_uuid,
		  !memcmp(a->pt->gpu_uuid, b->pt->gpu_uuid, P2PCLIENT_UUID_LEN));
	p2pclient_read_end(b);
	p2pclient_read_end(a);
	return 0;
}

static int p2pclient_exec(char *cmd, char *out, size_t size)
{
	char op[16], arg[16] = "";
	u64 a = 0, b = 0, token = 0;
	u32 va_space = 0, h = 0;
	struct p2pclient_pin *pin, *other;
	int n, slot = -1, where, ret;

	n = sscanf(cmd, "%15s %llu %llu %llu %u", op, &a, &b, &token, &va_space);
	if (n < 1)
		return -EINVAL;
	if (!strncmp(op, "get", 3) || !strcmp(op, "kget")) {
		if (n < 3)
			return -EINVAL;
		return p2pclient_get(op, a, b, token, va_space, out, size);
	}
	if (!strcmp(op, "nodata")) {
		scnprintf(out, size, "fired=%d", atomic_read(&nodata_fired));
		return 0;
	}

	if (sscanf(cmd, "%15s %u %15s %d", op, &h, arg, &slot) < 2)
		return -EINVAL;
	pin = xa_load(&client_pins, h);
	if (!pin)
		return -ENOENT;
	if (!strcmp(op, "put"))
		return nvidia_p2p_put_pages(0, 0, pin->va, pin->pt);
	if (!strcmp(op, "put_at")) {
		/* "put_at H VA" */
		if (sscanf(cmd, "%15s %u %llu", op, &h, &a) != 3)
			return -EINVAL;
		return nvidia_p2p_put_pages(0, 0, a, pin->pt);
	}
	if (!strcmp(op, "putp")) {
		/* "putp H [FLAGS]": flags 0 (the driver's only valid value) unless given */
		u32 flags = 0;

		if (sscanf(cmd, "%15s %u %u", op, &h, &flags) < 2)
			return -EINVAL;
		ret = nvidia_p2p_put_pages_persistent(pin->va, pin->pt, flags);
		if (!ret)
			pin->released = true;
		return ret;
	}
	if (!strcmp(op, "map") || !strcmp(op, "map_stale"))
		return p2pclient_map(pin, arg, !strcmp(op, "map_stale"), out, size);
	if (!strcmp(op, "unmap") || !strcmp(op, "unmap_stale") || !strcmp(op, "unmap_atomic")) {
		/* "unmap H M PEER" */
		if (sscanf(cmd, "%15s %u %d %15s", op, &h, &slot, arg) != 4)
			return -EINVAL;
		where = !strcmp(op, "unmap") ? 0 : !strcmp(op, "unmap_stale") ? 1 : 2;
		return p2pclient_unmap(pin, slot, arg, where);
	}
	if (!strcmp(op, "cbinfo")) {
		scnprintf(out, size, "kthread=%d ret=%d", pin->cb_kthread, pin->cb_ret);
		return 0;
	}
	if (!strcmp(op, "read"))
		return p2pclient_read_table(pin, out, size);
	if (!strcmp(op, "same")) {
		/* "same H1 H2" */
		if (sscanf(cmd, "%15s %u %llu", op, &h, &a) != 3)
			return -EINVAL;
		other = xa_load(&client_pins, a);
		return other ? p2pclient_same(pin, other, out, size) : -ENOENT;
	}
	if (!strcmp(op, "state")) {
		scnprintf(out, size, "revoked=%d cb_pid=%d", atomic_read(&pin->revoked),
			  pin->cb_pid);
		return 0;
	}
	return -EINVAL;
}

static int p2pclient_open(struct inode *inode, struct file *file)
{
	file->private_data = kzalloc(P2PCLIENT_RESULT, GFP_KERNEL);
	return file->private_data ? 0 : -ENOMEM;
}

static int p2pclient_release(struct inode *inode, struct file *file)
{
	kfree(file->private_data);
	return 0;
}

static ssize_t p2pclient_write(struct file *file, const char __user *ubuf, size_t len,
			       loff_t *ppos)
{
	char *out = file->private_data, cmd[128];
	bool unlocked;
	int ret;

	if (len >= sizeof(cmd))
		return -EINVAL;
	if (copy_from_user(cmd, ubuf, len))
		return -EFAULT;
	cmd[len] = '\0';
	out[0] = '\0';
	/*
	 * Unpins run outside client_lock, so that a test can pin while an
	 * unpin waits in nvsim (its put_pages_delay_us).
	 */
	unlocked = !strncmp(cmd, "put", 3);
	if (!unlocked)
		mutex_lock(&client_lock);
	ret = p2pclient_exec(cmd, out, P2PCLIENT_RESULT);
	if (!unlocked)
		mutex_unlock(&client_lock);
	if (ret)
		scnprintf(out, P2PCLIENT_RESULT, "err %d", ret);
	else if (!out[0])
		scnprintf(out, P2PCLIENT_RESULT, "ok");
	return len;
}

static ssize_t p2pclient_read(struct file *file, char __user *ubuf, size_t len, loff_t *ppos)
{
	char *out = file->private_data;

	return simple_read_from_buffer(ubuf, len, ppos, out, strlen(out));
}

static const struct file_operations p2pclient_fops = {
	.owner = THIS_MODULE,
	.open = p2pclient_open,
	.release = p2pclient_release,
	.write = p2pclient_write,
	.read = p2pclient_read,
	.llseek = default_llseek,
};

static int __init p2pclient_init(void)
{
	client_dir = debugfs_create_dir("p2pclient", NULL);
	debugfs_create_file("cmd", 0600, client_dir, NULL, &p2pclient_fops);
	return 0;
}

/* Pins still held are given back; persistent ones can be released from here. */
static void __exit p2pclient_exit(void)
{
	struct p2pclient_pin *pin;
	unsigned long id;

	debugfs_remove_recursive(client_dir);
	xa_for_each(&client_pins, id, pin) {
		if (pin->persistent && !pin->released)
			nvidia_p2p_put_pages_persistent(pin->va, pin->pt, 0);
		kfree(pin);
	}
	xa_destroy(&client_pins);
}

module_init(p2pclient_init);
module_exit(p2pclient_exit);
MODULE_DESCRIPTION("Minimal nv-p2p client for nvsim's tests");
MODULE_LICENSE("GPL");
