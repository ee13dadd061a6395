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
 *   get_nodata VA LEN            pin with NULL callback data
 *   get_locked VA LEN            pin under client_lock, callback takes client_lock
 *   getp VA LEN [FLAGS]          persistent pin (FLAGS: of get/put_pages_persistent)
 *   kget VA LEN                  pin from a kthread
 *   put H | putp H               unpin (the return value only)
 *   map H gpu|edu                DMA-map for a peer -> "ok M <addresses>"
 *   unmap H M gpu|edu            DMA-unmap
 *   state H                      "revoked=0|1 cb_pid=PID"
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

struct p2pclient_pin {
	struct nvidia_p2p_page_table *pt;
	u64 va;
	bool persistent;
	u32 flags;			/* of a persistent pin */
	bool takes_lock;		/* the deliberate AB-BA: see get_locked */
	atomic_t revoked;
	pid_t cb_pid;
	struct nvidia_p2p_dma_mapping *maps[P2PCLIENT_MAX_MAPS];
};

/* Serialises commands; deliberately taken in the callback only by get_locked pins. */
static DEFINE_MUTEX(client_lock);
static DEFINE_XARRAY_ALLOC1(client_pins);
static struct dentry *client_dir;

static void p2pclient_free_callback(void *data)
{
	struct p2pclient_pin *pin = data;
	int i;

	if (pin->takes_lock)
		mutex_lock(&client_lock);
	for (i = 0; i < P2PCLIENT_MAX_MAPS; i++)
		if (pin->maps[i])
			nvidia_p2p_free_dma_mapping(pin->maps[i]);
	nvidia_p2p_free_page_table(pin->pt);
	pin->cb_pid = task_pid_nr(current);
	atomic_set(&pin->revoked, 1);
	if (pin->takes_lock)
		mutex_unlock(&client_lock);
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
	if (!strcmp(op, "get")) {
		ret = nvidia_p2p_get_pages(token, va_space, va, len, &pin->pt,
					   p2pclient_free_callback, pin);
	} else if (!strcmp(op, "get_nocb")) {
		ret = nvidia_p2p_get_pages(0, 0, va, len, &pin->pt, NULL, pin);
	} else if (!strcmp(op, "get_nodata")) {
		ret = nvidia_p2p_get_pages(0, 0, va, len, &pin->pt, p2pclient_free_callback, NULL);
	} else if (!strcmp(op, "get_locked")) {
		/* client_lock is held (by the caller) while calling into nvsim. */
		lockdep_assert_held(&client_lock);
		pin->takes_lock = true;
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
			nvidia_p2p_put_pages_persistent(va, pin->pt, pin->flags);
		else
			nvidia_p2p_put_pages(0, 0, va, pin->pt);
		kfree(pin);
		return ret;
	}
	scnprintf(out, size, "ok %u ", id);
	p2pclient_table_str(pin->pt, out + strlen(out), size - strlen(out));
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

static int p2pclient_map(struct p2pclient_pin *pin, const char *peer_name, char *out, size_t size)
{
	struct pci_dev *peer = p2pclient_peer(peer_name);
	struct nvidia_p2p_dma_mapping *map;
	int slot, n, i, ret;

	if (!peer)
		return -ENODEV;
	for (slot = 0; slot < P2PCLIENT_MAX_MAPS && pin->maps[slot]; slot++)
		;
	ret = -ENOSPC;
	if (slot == P2PCLIENT_MAX_MAPS || atomic_read(&pin->revoked))
		goto out;
	ret = nvidia_p2p_dma_map_pages(peer, pin->pt, &map);
	if (ret)
		goto out;
	pin->maps[slot] = map;
	n = scnprintf(out, size, "ok %d version=0x%08x entries=%u dma=", slot, map->version,
		      map->entries);
	for (i = 0; i < map->entries; i++)
		n += scnprintf(out + n, size - n, "%s0x%llx", i ? "," : "", map->dma_addresses[i]);
out:
	pci_dev_put(peer);
	return ret;
}

static int p2pclient_unmap(struct p2pclient_pin *pin, int slot, const char *peer_name)
{
	struct pci_dev *peer = p2pclient_peer(peer_name);
	int ret = -EINVAL;

	if (!peer)
		return -ENODEV;
	if (slot >= 0 && slot < P2PCLIENT_MAX_MAPS && pin->maps[slot] &&
	    !atomic_read(&pin->revoked)) {
		ret = nvidia_p2p_dma_unmap_pages(peer, pin->pt, pin->maps[slot]);
		if (!ret)
			pin->maps[slot] = NULL;
	}
	pci_dev_put(peer);
	return ret;
}

static int p2pclient_exec(char *cmd, char *out, size_t size)
{
	char op[16], arg[16] = "";
	u64 a = 0, b = 0, token = 0;
	u32 va_space = 0, h = 0;
	struct p2pclient_pin *pin;
	int n, slot = -1;

	n = sscanf(cmd, "%15s %llu %llu %llu %u", op, &a, &b, &token, &va_space);
	if (n < 1)
		return -EINVAL;
	if (!strncmp(op, "get", 3) || !strcmp(op, "kget")) {
		if (n < 3)
			return -EINVAL;
		return p2pclient_get(op, a, b, token, va_space, out, size);
	}

	if (sscanf(cmd, "%15s %u %15s %d", op, &h, arg, &slot) < 2)
		return -EINVAL;
	pin = xa_load(&client_pins, h);
	if (!pin)
		return -ENOENT;
	if (!strcmp(op, "put"))
		return nvidia_p2p_put_pages(0, 0, pin->va, pin->pt);
	if (!strcmp(op, "putp"))
		return nvidia_p2p_put_pages_persistent(pin->va, pin->pt, pin->flags);
	if (!strcmp(op, "map"))
		return p2pclient_map(pin, arg, out, size);
	if (!strcmp(op, "unmap")) {
		/* "unmap H M PEER" */
		if (sscanf(cmd, "%15s %u %d %15s", op, &h, &slot, arg) != 4)
			return -EINVAL;
		return p2pclient_unmap(pin, slot, arg);
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
	int ret;

	if (len >= sizeof(cmd))
		return -EINVAL;
	if (copy_from_user(cmd, ubuf, len))
		return -EFAULT;
	cmd[len] = '\0';
	out[0] = '\0';
	mutex_lock(&client_lock);
	ret = p2pclient_exec(cmd, out, P2PCLIENT_RESULT);
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
		if (pin->persistent && !atomic_read(&pin->revoked))
			nvidia_p2p_put_pages_persistent(pin->va, pin->pt, pin->flags);
		kfree(pin);
	}
	xa_destroy(&client_pins);
}

module_init(p2pclient_init);
module_exit(p2pclient_exit);
MODULE_DESCRIPTION("Minimal nv-p2p client for nvsim's tests");
MODULE_LICENSE("GPL");
