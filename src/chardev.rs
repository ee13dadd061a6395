// SPDX-License-Identifier: GPL-2.0

//! `/dev/gdrpeer`: one [`GdrpeerFile`] per open file, ioctls dispatched here.

use kernel::{
    fs::File,
    ioctl::_IOC_SIZE,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    prelude::*,
    uaccess::{UserPtr, UserSlice},
};

use crate::{nv_p2p, uapi};

/// Registers `/dev/gdrpeer`.
pub(crate) fn register() -> impl PinInit<MiscDeviceRegistration<GdrpeerFile>, Error> {
    MiscDeviceRegistration::register(MiscDeviceOptions { name: c"gdrpeer" })
}

/// The state of one open file of `/dev/gdrpeer`.
pub(crate) struct GdrpeerFile;

#[vtable]
impl MiscDevice for GdrpeerFile {
    type Ptr = KBox<Self>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        Ok(KBox::new(GdrpeerFile, GFP_KERNEL)?)
    }

    fn ioctl(_me: &GdrpeerFile, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        match cmd {
            uapi::IOCTL_GET_VERSION => get_version(user),
            _ => Err(ENOTTY),
        }
    }
}

fn get_version(user: UserSlice) -> Result<isize> {
    let (mut reader, mut writer) = user.reader_writer();
    let mut v: uapi::Version = reader.read()?;
    if v.size as usize != core::mem::size_of::<uapi::Version>() {
        return Err(EINVAL);
    }
    v.abi_version = uapi::ABI_VERSION;
    v.nv_page_table_version = nv_p2p::PAGE_TABLE_VERSION;
    v.nv_dma_mapping_version = nv_p2p::DMA_MAPPING_VERSION;
    writer.write(&v)?;
    Ok(0)
}
